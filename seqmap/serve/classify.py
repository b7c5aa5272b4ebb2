"""The model side of ``POST /classify``: texts or images in, classes, probabilities and attention out. No HTTP here.

``ClassifierEngine`` wraps a loaded classifier run (``data.task`` classification or image) and offers
what the app and the batcher call:

    engine.inputs(req)              -> the request's inputs, checked (in the request's handler)
    engine.run_classify(key, jobs)  -> per job, its list of classification dicts (in the worker thread)

Every input of a batch goes through the model in one forward pass: texts padded (padding never
changes a prediction: padded keys get zero attention weight), images stacked. Attention, when asked
for, is the class token's: attention rollout through every layer and the last layer's row, mean of
heads (``seqmap.nn.rollout``), the same maps ``seqmap plot attention`` draws.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import torch

from seqmap.config import to_dict
from seqmap.data.batching import collate_images, collate_labels
from seqmap.data.images import ImageError, read_image_file
from seqmap.data.pipeline import classification_ids
from seqmap.nn.rollout import class_token_attention
from seqmap.runs import LoadedRun
from seqmap.serve.engine import run_header
from seqmap.serve.schemas import ClassifyRequest, Limits, RequestError, check_classify, decode_base64
from seqmap.tasks.registry import TASKS

DECIMALS = 4
CLASSIFY_KEY = ("classify",)  # one kind of batch: every /classify request can share it


@dataclass(frozen=True)
class ClassifyJob:
    inputs: list  # token id lists (text) or (C, H, W) uint8 images
    tokens: list[list[str]] | None  # text: each input's tokens, for the attention answer
    top: int
    attention: bool


class ClassifierEngine:
    """A loaded classifier run and the work of /classify (``run_classify`` is called from the worker thread only)."""

    def __init__(self, run: LoadedRun, limits: Limits | None = None) -> None:
        self.run = run
        self.limits = limits or Limits()
        self.task = run.cfg.data.task  # classification | image
        self.images = TASKS[self.task].input == "image"  # base64 images in, else texts
        m = run.cfg.model
        self.has_attention = m.pooling == "cls"  # the maps read the class token's row
        layers = m.enc_layers
        self.attention_shape = {"available": self.has_attention, "layers": layers, "heads": m.n_heads}

    # -- in the request's handler ---------------------------------------------------------------
    def inputs(self, req: ClassifyRequest) -> ClassifyJob:
        """The request as a job: texts tokenized or images decoded, each checked; errors name the field."""
        items = check_classify(req, self.limits, self.images)
        if req.attention and not self.has_attention:
            raise RequestError("this model pools by mean (model.pooling=mean) and has no class token to read "
                               "attention from; send attention=false", "attention", 409)
        one = isinstance(req.image if self.images else req.text, str)
        if self.images:
            images = [self._image(item, "image" if one else f"image[{i}]") for i, item in enumerate(items)]
            return ClassifyJob(images, None, req.top, req.attention)
        tok, max_len = self.run.src_tok, self.run.cfg.data.max_len
        ids = [classification_ids(tok, text, max_len) for text in items]  # truncated as in training and `classify`
        tokens = [tok.tokens(text) for text in items] if req.attention else None
        return ClassifyJob(ids, tokens, req.top, req.attention)

    def _image(self, data: str, field: str) -> torch.Tensor:
        raw = decode_base64(data, field, "image")
        m = self.run.cfg.model
        try:
            return read_image_file(io.BytesIO(raw), "L" if m.image_channels == 1 else "RGB",
                                   (m.image_height, m.image_width), name=field, max_pixels=self.limits.max_image_pixels)
        except ImageError as e:
            raise RequestError(str(e), field) from None

    # -- in the worker thread ---------------------------------------------------------------------
    @torch.no_grad()
    def run_classify(self, key, jobs: list[ClassifyJob]) -> list[list[dict[str, Any]]]:
        """One forward pass over every input of every job; per job, its classifications in order."""
        inputs = [x for job in jobs for x in job.inputs]
        if self.images:
            batch = collate_images(torch.stack(inputs), [0] * len(inputs))
        else:
            batch = collate_labels([(ids, 0) for ids in inputs])
        batch = batch.to(self.run.device)
        model = self.run.model
        probs = model(batch.src, batch.src_mask).float().softmax(-1).cpu()
        want_attention = any(job.attention for job in jobs)
        weights = model.encoder_attention(batch.src, batch.src_mask).cpu() if want_attention else None
        out, row = [], 0
        for job in jobs:
            answers = []
            for i in range(len(job.inputs)):
                answer = self._answer(probs[row], job.top)
                if job.attention:
                    answer["attention"] = self._attention(weights[row], job, i, batch.src_mask, row)
                answers.append(answer)
                row += 1
            out.append(answers)
        return out

    def _answer(self, probs: torch.Tensor, top: int) -> dict[str, Any]:
        k = min(top, probs.numel())
        best = probs.topk(k)
        scores = [{"label": self.run.labels.decode(int(i)), "probability": round(float(p), DECIMALS)}
                  for p, i in zip(best.values, best.indices)]
        return {"label": scores[0]["label"], "probability": scores[0]["probability"], "top": scores}

    def _attention(self, weights: torch.Tensor, job: ClassifyJob, i: int, mask, row: int) -> dict[str, Any]:
        """The class token's maps for one input: (L, H, S', S') weights cut to its real positions."""
        n = weights.size(-1) if mask is None else int(mask[row].sum()) + 1  # + the class token
        rollout, last = class_token_attention(weights[..., :n, :n])
        answer = {"rollout": rollout.round(decimals=DECIMALS).tolist(),
                  "last_layer": last.round(decimals=DECIMALS).tolist(), "tokens": None, "grid": None}
        if self.images:
            answer["grid"] = list(self.run.model.encoder.embedding.grid)
        else:
            answer["tokens"] = job.tokens[i][: n - 1]
        return answer

    def info(self) -> dict[str, Any]:
        """What /info shows: the model, its classes, its input, how it was trained, limits."""
        run, cfg = self.run, self.run.cfg
        m, d, t = cfg.model, cfg.data, cfg.train
        about_input = ({"channels": m.image_channels, "height": m.image_height, "width": m.image_width,
                        "patch_size": m.patch_size, "grid": list(run.model.encoder.embedding.grid)}
                       if self.images else
                       {"tokenizer": run.src_tok.kind, "vocabulary": run.src_tok.vocab_size})
        return {
            **run_header(run, self.task),
            "sizes": {"d_model": m.d_model, "n_heads": m.n_heads, "d_ff": m.d_ff, "enc_layers": m.enc_layers,
                      "positional": m.positional, "norm_position": m.norm_position, "pooling": m.pooling},
            "attention": self.attention_shape,
            "classes": list(run.labels.names),
            "input": about_input,
            "training": {"max_steps": t.max_steps, "lr": t.lr, "schedule": t.schedule, "warmup": t.warmup,
                         "dropout": m.dropout, "augment_shift": d.augment_shift},
            "model_config": to_dict(m),
        }
