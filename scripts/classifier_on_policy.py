"""Where does a trained policy meet its success classifier? (diagnostic for docs/rewards.md)

    MUJOCO_GL=egl python scripts/classifier_on_policy.py RUN_DIR MODEL_DIR [EPISODES] [--png FILE]

Runs the run's final deterministic policy in the sim (episode seeds 50000..), scores every
frame with the classifier, and stops an episode where the classifier or the sim first says
success. Prints each classifier-ended episode with the true cube height there: the false
positives a policy trained on that classifier learned to reach. Sim only (reads the truth).
"""
from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("model")
    ap.add_argument("episodes", type=int, nargs="?", default=20)
    ap.add_argument("--png", help="save the first false-positive frames here")
    args = ap.parse_args()

    from robolearn.policies.checkpoints import load_policy
    from robolearn.rewards.classifier import ClassifierReward
    from robolearn.rewards.evaluate import env_kwargs_for
    from robolearn.sim.arm_workspace import CUBE_HALF, LIFT_HEIGHT

    clf = ClassifierReward(args.model)
    act, env, _ = load_policy(args.run, env_kwargs={**env_kwargs_for(clf.meta), "privileged_obs": True})
    base = env.unwrapped
    ended = true_at_end = true_first = 0
    fps = []
    for ep in range(args.episodes):
        obs, _ = env.reset(seed=50_000 + ep)
        for t in range(env.spec.max_episode_steps or 100):
            obs, *_ = base.step(np.asarray(act(obs), np.float32))
            imgs = {c: base.backend.cameras[c].read().image for c in clf.cameras}
            p = float(clf.score(imgs)[0])
            cube = base.task.cube_pose()[0]
            height = float(cube[2] - CUBE_HALF)
            true, pred = height >= LIFT_HEIGHT, p >= clf.threshold
            if pred:
                ended += 1
                true_at_end += int(true)
                rel = base.task.ee_pos - cube
                print(f"episode {ep}: classifier success at step {t + 1} (score {p:.4f}); cube {100 * height:.1f} cm up "
                      f"({'true' if true else 'FALSE'}); grasp point - cube {np.round(100 * rel, 1).tolist()} cm")
                if not true and len(fps) < 12:
                    fps.append(imgs[clf.cameras[0]])
                break
            if true:
                true_first += 1
                break
    print(f"{args.episodes} episodes: {ended} ended by the classifier ({true_at_end} true successes there, "
          f"{ended - true_at_end} false), {true_first} reached true success before the classifier said so")
    env.close()
    if args.png and fps:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(fps), figsize=(1.6 * len(fps), 1.8), squeeze=False)
        for ax, img in zip(axes[0], fps):
            ax.imshow(img)
            ax.axis("off")
        fig.savefig(args.png, dpi=90)


if __name__ == "__main__":
    main()
