"""The cube's orientation as an observation: one quaternion per *look*, not per pose.

The cube is one colour, so its 24 rotational symmetries look (and push) alike. The raw
simulator quaternion tells them apart, and it also flips sign freely (q and -q are one
rotation): a cube set down on another face after a physical reset reads as a far-away
quaternion although nothing a camera or the fingers could tell has changed. Teleport resets
only ever start it upright, so a learner trained on them never sees those values and a
learner trained from physical resets has to learn that they do not matter. Reporting the
symmetric twin nearest the identity (w >= 0) removes both.
"""
from __future__ import annotations

import itertools

import numpy as np


def _cube_symmetries() -> np.ndarray:
    """The 24 rotations (wxyz) that map a cube onto itself, up to sign."""
    s = 1.0 / np.sqrt(2.0)
    out = [np.eye(4)[i] for i in range(4)]                                  # identity, 180 about an axis
    for i in range(1, 4):                                                    # +-90 about an axis
        for sign in (1.0, -1.0):
            q = np.zeros(4)
            q[0], q[i] = s, sign * s
            out.append(q)
    for signs in itertools.product((0.5, -0.5), repeat=3):                  # +-120 about a diagonal
        out.append(np.array([0.5, *signs]))
    for i, j in ((1, 2), (1, 3), (2, 3)):                                    # 180 about an edge axis
        for sign in (1.0, -1.0):
            q = np.zeros(4)
            q[i], q[j] = s, sign * s
            out.append(q)
    return np.array(out)


CUBE_SYMMETRIES = _cube_symmetries()


def _multiply(q: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Hamilton products q * g for one q (4,) and many g (n, 4)."""
    w1, x1, y1, z1 = q
    w2, x2, y2, z2 = g.T
    return np.stack((w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
                     w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                     w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2), axis=1)


def canonical_cube_quat(quat) -> np.ndarray:
    """The cube orientation among its 24 look-alikes that is nearest the identity, with w >= 0
    (body-frame symmetries: q * g). Upright and turned by yaw in (-45, 45] deg -> unchanged."""
    q = np.asarray(quat, dtype=np.float64)
    q = q / np.linalg.norm(q)
    twins = _multiply(q, CUBE_SYMMETRIES)
    best = twins[int(np.argmax(np.abs(twins[:, 0])))]
    return best if best[0] >= 0 else -best
