"""A Hugging Face Trainer that gives its GPU back when homebased asks.

The Trainer owns the loop, so the yield check is a TrainerCallback: when
$HOMEBASED_YIELD_FILE exists it asks for a checkpoint (should_save) and for the loop to end
(should_training_stop). train() then returns normally, and the script exits 75. The next
attempt resumes from the last checkpoint under $HOMEBASED_JOB_DIR, and only when one exists
(resume_from_checkpoint=None otherwise: a first attempt has nothing to resume).

Submit with "preempt": {"mode": "yield"} and "env": {"PYTHONUNBUFFERED": "1"}.
"""

import os
import sys
import time

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

JOB_DIR = os.environ.get("HOMEBASED_JOB_DIR", ".")
STEP = os.environ.get("HOMEBASED_STEP_INDEX", "0")
OUTPUT_DIR = os.path.join(JOB_DIR, f"trainer-step{STEP}")
YIELD_FILE = os.environ.get("HOMEBASED_YIELD_FILE", "")
MAX_STEPS = int(os.environ.get("EXAMPLE_STEPS", "300"))
# Slows the demo down so that a yield can be watched; real steps take their own time.
STEP_DELAY = float(os.environ.get("EXAMPLE_STEP_DELAY", "0"))
YIELDED = 75


class YieldOnRequest(TrainerCallback):
    """Checkpoint and stop at the end of the step during which a yield was requested."""

    def __init__(self):
        self.yielded = False

    def on_step_end(self, args, state, control, **kwargs):
        if YIELD_FILE and os.path.exists(YIELD_FILE):
            self.yielded = True
            control.should_save = True
            control.should_training_stop = True
        return control


class SlowDown(TrainerCallback):
    """Demo only: makes each step last EXAMPLE_STEP_DELAY seconds."""

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(STEP_DELAY)
        return control


class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x, labels):
        prediction = self.linear(x)
        return {"loss": torch.nn.functional.mse_loss(prediction, labels)}


def dataset(n=256):
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(n):
        x = torch.randn(4, generator=generator)
        rows.append({"x": x, "labels": x.sum(dim=0, keepdim=True)})
    return rows


def main():
    os.makedirs(OUTPUT_DIR, exist_ok=True)
    args = TrainingArguments(
        output_dir=OUTPUT_DIR,
        max_steps=MAX_STEPS,
        per_device_train_batch_size=8,
        learning_rate=0.05,
        save_strategy="steps",
        save_steps=100,
        save_total_limit=2,
        logging_steps=50,
        report_to=[],
        seed=0,
        disable_tqdm=True,
    )
    callback = YieldOnRequest()
    trainer = Trainer(
        model=Regressor(), args=args, train_dataset=dataset(), callbacks=[SlowDown(), callback]
    )
    last = get_last_checkpoint(OUTPUT_DIR) if os.path.isdir(OUTPUT_DIR) else None
    print(f"resuming from {last}" if last else "starting afresh")
    trainer.train(resume_from_checkpoint=last)
    if callback.yielded:
        print(f"yielding at step {trainer.state.global_step}")
        sys.exit(YIELDED)
    print(f"done at step {trainer.state.global_step}")


if __name__ == "__main__":
    main()
