"""`robolearn reward train|eval|serve`: train a reward model from a dataset; validate it in sim;
serve it to a learner from a process of its own.

    robolearn reward train DATASET --kind classifier|progress --out DIR
    robolearn reward eval --env ID --model DIR --episodes N [--policy RUN_DIR] [--png PATH]
    robolearn reward serve --model DIR --address tcp://HOST:PORT   ([reward] where = "server")

`eval` compares the model with the sim's ground truth on fresh scripted, random, perturbed
(gripper open, lifted too low) and, with --policy, policy episodes: precision, recall, F1,
rank correlation of progress with true progress, latency per frame, and a PNG of score vs truth.
"""
from __future__ import annotations

HELP = ("Train a reward model (success classifier, progress) from a dataset, validate one in sim, or serve "
        "one on a socket.")


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    t = sub.add_parser("train", help="train a reward model from a recorded dataset")
    t.add_argument("dataset", help="dataset folder recorded with camera frames (robolearn record --obs both)")
    t.add_argument("--kind", choices=("classifier", "progress"), required=True)
    t.add_argument("--out", required=True, help="model folder (model.safetensors + reward.json)")
    t.add_argument("--overwrite", action="store_true",
                   help="replace a model already in --out (without it, an existing model is never touched)")
    t.add_argument("--cameras", nargs="+", default=None, help="cameras to use (default: all recorded)")
    t.add_argument("--epochs", type=int, default=None,
                   help="training epochs (default: the model's config, classifier 30, progress 15)")
    t.add_argument("--target-precision", type=float, default=0.99,
                   help="classifier: choose the threshold for this held-out precision (default 0.99)")
    t.add_argument("--pretrained", default=None, help="classifier: local safetensors of a conv encoder")
    t.add_argument("--freeze-encoder", action="store_true", help="classifier: train the head only")
    t.add_argument("--colour-jitter", action="store_true",
                   help="classifier: random tint/brightness/contrast in training, for a camera whose "
                        "colours and light differ from the recording's (docs/rewards.md)")
    t.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("eval", help="compare a reward model with the sim's ground truth on fresh episodes")
    e.add_argument("--env", required=True, help="sim env ID, e.g. robolearn/ArmLift-v0")
    e.add_argument("--model", required=True, help="model folder from `robolearn reward train`")
    e.add_argument("--episodes", type=int, default=50)
    e.add_argument("--seed", type=int, default=100_000, help="first episode seed (fresh: not the training seeds)")
    e.add_argument("--policy", default=None, help="also run episodes of this trained policy (run folder)")
    e.add_argument("--png", default=None, help="score-vs-truth plot (default DIR/eval_<env>.png)")
    e.add_argument("--json", default=None, help="also write the results as JSON")
    s = sub.add_parser("serve", help="answer a learner's scoring requests on a ZeroMQ socket ([reward] "
                                     "where = \"server\"; robolearn finetune starts it itself)")
    s.add_argument("--model", required=True, help="model folder (loaded as [reward] model = DIR)")
    s.add_argument("--address", required=True, help="socket to bind, tcp://HOST:PORT (the learner's "
                                                    "[reward] address)")
    s.add_argument("--kind", default=None, help="model kind (default: the folder's reward.json)")
    s.add_argument("--threshold", type=float, default=None, help="override the success threshold")
    s.add_argument("--device", default="cpu")
    s.add_argument("--max-message-bytes", type=int, default=64 << 20, help="largest request accepted")


def run(args) -> int:
    import json
    from pathlib import Path

    from robolearn.errors import ConfigError

    if args.action == "serve":
        from robolearn.reward_config import reward_config
        from robolearn.runtime.reward_server import serve

        if not Path(args.model).is_dir():
            raise ConfigError(f"--model {args.model}: no such model folder (from `robolearn reward train`)")
        table = {"model": args.model, "device": args.device, "where": "server", "address": args.address}
        table.update({k: v for k, v in (("kind", args.kind), ("threshold", args.threshold)) if v is not None})
        serve(reward_config(table, "reward serve"), args.address, args.max_message_bytes)
        return 0
    if args.action == "train":
        if args.epochs is not None and args.epochs < 1:
            raise ConfigError(f"--epochs {args.epochs}: must be >= 1")
        from robolearn.rewards.checkpoint import existing_model

        earlier = existing_model(args.out)
        if earlier and not args.overwrite:  # checked before minutes of training, not after
            raise ConfigError(f"{args.out} already holds a reward model ({', '.join(earlier)}); choose "
                              "another --out or pass --overwrite to replace it (nothing was changed)")
        if args.kind == "classifier":
            from robolearn.rewards.classifier import ClassifierConfig, train_classifier

            if not 0 < args.target_precision <= 1:
                raise ConfigError(f"--target-precision {args.target_precision}: choose a value in (0, 1]")
            epochs = {} if args.epochs is None else {"epochs": args.epochs}
            cfg = ClassifierConfig(cameras=args.cameras or [], **epochs, seed=args.seed,
                                   target_precision=args.target_precision, pretrained=args.pretrained,
                                   freeze_encoder=args.freeze_encoder, colour_jitter=args.colour_jitter)
            _, report = train_classifier(args.dataset, cfg, out=args.out)
            h = report["held_out"]
            print(f"held-out episodes: precision {h['precision']:.3f}, recall {h['recall']:.3f}, F1 {h['f1']:.3f} "
                  f"at threshold {h['threshold']:.4f} ({h['positives']} success frames of {h['frames']})")
        else:
            from robolearn.rewards.progress import ProgressConfig, train_progress

            epochs = {} if args.epochs is None else {"epochs": args.epochs}
            _, report = train_progress(args.dataset, ProgressConfig(cameras=args.cameras or [], **epochs,
                                                                    seed=args.seed), out=args.out)
        print(f"saved {args.out}")
        return 0
    if args.episodes < 1:
        raise ConfigError(f"--episodes {args.episodes}: must be >= 1")
    from robolearn.rewards.evaluate import evaluate_model

    policy = None
    if args.policy:
        from robolearn.policies.checkpoints import load_policy

        loaded = load_policy(args.policy)
        policy = loaded[0] if isinstance(loaded, tuple) else loaded
    png = args.png or str(Path(args.model) / f"eval_{args.env.split('/')[-1]}.png")
    res = evaluate_model(args.env, args.model, episodes=args.episodes, seed=args.seed, policy=policy, png=png,
                         log=lambda s: None)
    o = res["overall"]
    print(f"{args.env}: {res['kind']} model {args.model} on {args.episodes} fresh episodes "
          f"({o['frames']} frames, {o['positives']} true success frames)")
    print(f"  precision {o['precision']:.3f}  recall {o['recall']:.3f}  F1 {o['f1']:.3f}  (threshold {res['threshold']:.4f})")
    for k, m in res["by_kind"].items():
        print(f"  {k:9s} precision {m['precision']:.3f} recall {m['recall']:.3f} false positives {m['fp']}")
    if "progress_spearman_mean" in res:
        print(f"  rank correlation of progress with true progress: {res['progress_spearman_mean']:.3f} "
              f"(mean over episodes), {res['progress_spearman_pooled']:.3f} (pooled); "
              f"{res['progress_spearman_definition']}")
        for truth, spans in res["progress_spearman"].items():
            print("    " + truth + ": " + ", ".join(f"{span} {m['mean']:.3f}" for span, m in spans.items()))
    lat = res["latency_ms_per_frame"]
    print(f"  latency per frame: median {lat['median']:.2f} ms, p95 {lat['p95']:.2f} ms; plot {png}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0
