"""The optimizer registry: `TrialConfig.optimizer` names one of these (torch only, so the
config can validate against it without importing the trainer)."""
from __future__ import annotations

import torch

OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"adam": torch.optim.Adam,
                                                      "adamw": torch.optim.AdamW}
