"""Updates/s of one preset, autograd vs `cpu_update="manual"`, in interleaved rounds.

Usage: python scripts/time_update_paths.py ALGO [OPTIONS_DICT] [THREADS]
e.g.   python scripts/time_update_paths.py rlpd "{'num_critics': 2}"
One thread: process CPU time (robust on a shared machine); more: wall clock. Same data, obs 17,
action 6, batch 256, replay sampling included (docs/learners.md, "CPU: the hand-written update").
"""
import ast
import sys

import torch

from robolearn.data.replay import ReplayBuffer
from robolearn.policies.speed_harness import _fill_ours, _interleaved, _our_runner, _random_data, _spaces


def main() -> None:
    algo = sys.argv[1]
    options = ast.literal_eval(sys.argv[2]) if len(sys.argv) > 2 else {}
    torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    obs_space, act_space = _spaces(17, 6)
    buf = ReplayBuffer(obs_space, act_space, capacity=5000, seed=0)
    _fill_ours(buf, _random_data(3000, 17, 6, 0))
    runners = {u: _our_runner(algo, obs_space, act_space, buf, 256, "cpu", 0, cpu_update=u, **options)
               for u in ("autograd", "manual")}
    speed = _interleaved(runners, steps=150, warmup=3, rounds=5, sync=lambda: None)
    clock = "cpu" if torch.get_num_threads() == 1 else "wall"
    rate = {k: v[clock] for k, v in speed.items()}
    print(f"{algo} {options}: autograd {rate['autograd']:.1f}/s, manual {rate['manual']:.1f}/s, "
          f"ratio {rate['manual'] / rate['autograd']:.2f}x ({clock} clock)")


if __name__ == "__main__":
    main()
