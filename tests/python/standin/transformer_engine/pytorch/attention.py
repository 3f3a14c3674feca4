"""Stand-in of TE's DotProductAttention: a TE module whose compute is FP8 only when the autocast's
recipe asks for FP8 attention (fp8_dpa, or fp8_mha which implies it), as TE's own decides
(`self.fp8 and recipe.fp8_dpa`); otherwise it runs in high precision inside an FP8 autocast."""

import torch

from .module.base import TransformerEngineBaseModule, fake_fp8, record_amax


class DotProductAttention(TransformerEngineBaseModule):
    FORWARD_TENSORS = 3

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                fp8_output=False) -> torch.Tensor:
        del fp8_output  # TE's keyword and default (its place among TE's many arguments aside)
        query = self.prepare_forward(query, allow_non_contiguous=True)
        try:
            recipe = self.fp8_meta.get("recipe")
            if self.fp8 and (recipe.fp8_dpa or recipe.fp8_mha):
                meta = self.fp8_meta["scaling_fwd"]
                for i, t in enumerate((query, key, value)):
                    record_amax(meta.amax_history, i, t)
                query, key, value = (fake_fp8(t, meta.scale[i].clone(), self.fp8_max(True))
                                     for i, t in enumerate((query, key, value)))
            scores = query @ key.transpose(-1, -2) / query.shape[-1] ** 0.5
            return torch.softmax(scores, dim=-1) @ value
        finally:
            self.end_forward()
