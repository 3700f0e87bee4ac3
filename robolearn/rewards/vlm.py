"""VLM-RM: CLIP as a zero-shot reward model (Rocamonde et al., "Vision-Language Models are
Zero-Shot Reward Models for Reinforcement Learning").

With x the normalised CLIP image embedding, g and b the normalised embeddings of the goal and
baseline prompts, d = g - b and the goal-baseline projection

    P = alpha * d d^T / |d|^2 + (1 - alpha) * I,

the reward is  r = 1 - 1/2 * |(x - g) P|^2.  alpha = 0 is plain CLIP (r = cos(x, g) for unit
vectors); alpha = 1 keeps only the component along baseline -> goal, which removes what the
two prompts agree on (background, robot colour). This is the paper's formula as in its code
(AlignmentResearch/vlmrm, `CLIPReward.forward`).

Weights load from a LOCAL folder only (transformers `CLIPModel.save_pretrained` layout, with
its tokenizer files); nothing is downloaded at run time. Fetch ViT-B/32 once with
`huggingface-cli download openai/clip-vit-base-patch32 --local-dir models/clip-vit-base-patch32`
(see docs/rewards.md). Needs the optional extra: `pip install -e '.[vlm]'`.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from robolearn.rewards.base import MISSING, RewardModelError

#: CLIP's image normalisation (same for every OpenAI CLIP checkpoint)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def goal_baseline_projection(goal: torch.Tensor, baseline: torch.Tensor, alpha: float) -> torch.Tensor:
    """P = alpha * d d^T / |d|^2 + (1 - alpha) I, with d = goal - baseline (both (D,))."""
    d = (goal - baseline).reshape(1, -1)
    proj = d.T @ d / torch.linalg.vector_norm(d) ** 2
    return alpha * proj + (1.0 - alpha) * torch.eye(proj.shape[0], dtype=proj.dtype, device=proj.device)


def vlm_rm_reward(x: torch.Tensor, goal: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """r = 1 - 1/2 |(x/|x| - goal) P|^2 for a batch of image embeddings x (B, D)."""
    x = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return 1.0 - 0.5 * torch.linalg.vector_norm((x - goal) @ projection, dim=-1) ** 2


class CLIPReward:
    """RewardSource: the VLM-RM reward of a camera frame; success when it is >= `threshold`
    (no threshold: never success, a shaping reward only). Batched via `score(images)`."""

    def __init__(self, path: str | Path, goal: str, baseline: str | None = None, alpha: float = 1.0,
                 threshold: float | None = None, camera: str | None = None, device: str = "cpu",
                 batch_size: int = 64):
        path = Path(path)
        if not path.is_dir() or not (path / "config.json").is_file():
            raise RewardModelError(
                f"CLIP model folder {path} not found or has no config.json; fetch the weights once with "
                f"`huggingface-cli download openai/clip-vit-base-patch32 --local-dir {path}` (nothing "
                "is downloaded at run time)")
        try:
            from transformers import AutoTokenizer, CLIPModel
        except ImportError:
            raise RewardModelError("the CLIP reward needs transformers: pip install -e '.[vlm]'") from None
        try:
            self.model = CLIPModel.from_pretrained(str(path), local_files_only=True).to(device).eval()
            self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise RewardModelError(f"cannot load a CLIP model from {path}: {exc}") from None
        if not 0.0 <= alpha <= 1.0:
            raise RewardModelError(f"alpha={alpha}: the projection strength must be in [0, 1]")
        self.device, self.alpha, self.camera = device, float(alpha), camera
        self.threshold = threshold
        self.batch_size = batch_size
        self.image_size = int(self.model.config.vision_config.image_size)
        self.goal_prompt, self.baseline_prompt = goal, baseline
        g = self.embed_text([goal])[0]
        b = self.embed_text([baseline])[0] if baseline else None
        self.goal = g
        # no baseline prompt: no direction to project on, the plain CLIP reward (alpha = 0)
        self.projection = (goal_baseline_projection(g, b, self.alpha) if b is not None
                           else torch.eye(g.shape[0], device=device))
        self.env = None
        self.latencies: list[float] = []
        self.cameras = [camera] if camera else []

    @torch.no_grad()
    def embed_text(self, prompts: list[str]) -> torch.Tensor:
        tok = self.tokenizer(prompts, padding=True, return_tensors="pt").to(self.device)
        e = self.model.get_text_features(**tok)
        e = getattr(e, "pooler_output", e)
        return e / torch.linalg.vector_norm(e, dim=-1, keepdim=True)

    @torch.no_grad()
    def embed_images(self, images: np.ndarray) -> torch.Tensor:
        """(B, H, W, 3) uint8 -> (B, D) CLIP image embeddings (resized + CLIP-normalised here)."""
        x = torch.from_numpy(np.ascontiguousarray(images)).to(self.device).permute(0, 3, 1, 2).float() / 255.0
        x = torch.nn.functional.interpolate(x, size=(self.image_size, self.image_size), mode="bicubic",
                                            align_corners=False).clamp(0, 1)
        mean = torch.tensor(CLIP_MEAN, device=self.device).view(1, 3, 1, 1)
        std = torch.tensor(CLIP_STD, device=self.device).view(1, 3, 1, 1)
        e = self.model.get_image_features(pixel_values=(x - mean) / std)
        return getattr(e, "pooler_output", e)

    @torch.no_grad()
    def score(self, images) -> np.ndarray:
        """VLM-RM rewards for (B, H, W, 3) uint8 frames (or {camera: frames}), in batches."""
        if isinstance(images, dict):
            images = images[self.camera] if self.camera else next(iter(images.values()))
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[None]
        if images.ndim != 4 or images.shape[-1] != 3:
            raise RewardModelError(f"CLIP reward needs (B, H, W, 3) uint8 frames, got shape {images.shape}")
        out = []
        for s in range(0, len(images), self.batch_size):
            out.append(vlm_rm_reward(self.embed_images(images[s:s + self.batch_size]), self.goal,
                                     self.projection).cpu().numpy())
        return np.concatenate(out)

    def bind(self, env) -> None:
        self.env = env

    def reset(self) -> None:
        pass

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        from robolearn.rewards.base import camera_images

        t0 = time.perf_counter()
        cam = self.camera or next((k for k in obs if k != "state"), None)
        if cam is None and self.env is not None and self.env.backend.cameras:
            cam = next(iter(self.env.backend.cameras))
        if cam is None:
            raise RewardModelError("the CLIP reward needs a camera: make the env with obs='pixels' or 'both', "
                                   "or set camera=")
        img = obs.get(cam)
        if img is None:
            shape = self.env.backend.cameras[cam].shape if self.env is not None and cam in self.env.backend.cameras else None
            img = camera_images(obs, [cam], shape or (0, 0, 3), self.env)[cam]
        r = float(self.score(img)[0])
        self.latencies.append(time.perf_counter() - t0)
        del self.latencies[:-1000]
        if not np.isfinite(r):
            return MISSING, False
        return r, bool(self.threshold is not None and r >= self.threshold)
