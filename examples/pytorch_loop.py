"""A plain PyTorch training loop that gives its GPU back when homebased asks.

Submit it with "preempt": {"mode": "yield"} and run it unbuffered:
    "workload": {"type": "task", "command": ["python3", "-u", "examples/pytorch_loop.py"]}

The contract (docs/CHECKPOINTS.md):
- checkpoints live in $HOMEBASED_JOB_DIR, shared by every attempt of the job;
- a checkpoint is written beside the old one and renamed over it, never half-written;
- between steps, if $HOMEBASED_YIELD_FILE exists: save, then exit 75;
- at start, load whatever checkpoint exists ($HOMEBASED_RESUME=1 says an earlier attempt of
  this step yielded, but a checkpoint is the truth, not the flag);
- a TERM is a yield request too: under Slurm (`homebased slurm submit`, docs/SLURM.md), a
  requeue or a preemption sends TERM to every process of the job before its KillWait ends,
  and on a homebased machine a TERM is a stop whose checkpoint a restart still uses.
Everything that decides the next batch (model, optimizer, both RNGs, the step) is saved, so
a run that yielded and resumed ends with the same weights as one that never stopped.
"""

import os
import random
import signal
import sys
import time

import torch

JOB_DIR = os.environ.get("HOMEBASED_JOB_DIR", ".")
# One checkpoint per step of the job: a later step must not load an earlier step's state.
STEP = os.environ.get("HOMEBASED_STEP_INDEX", "0")
CHECKPOINT = os.path.join(JOB_DIR, f"loop-step{STEP}.pt")
YIELD_FILE = os.environ.get("HOMEBASED_YIELD_FILE", "")
TOTAL_STEPS = int(os.environ.get("EXAMPLE_STEPS", "300"))
# Slows the demo down so that a yield can be watched; real steps take their own time.
STEP_DELAY = float(os.environ.get("EXAMPLE_STEP_DELAY", "0"))
YIELDED = 75
terminated = False


def on_term(signum, frame):
    # Only a flag: the step in flight finishes, then the loop saves and exits.
    global terminated
    terminated = True


def yield_requested():
    return terminated or (bool(YIELD_FILE) and os.path.exists(YIELD_FILE))


def save(model, optimizer, step):
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
    }
    tmp = CHECKPOINT + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, CHECKPOINT)  # atomic: the old checkpoint or the new one, never half


def main():
    signal.signal(signal.SIGTERM, on_term)
    torch.manual_seed(0)
    random.seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    if os.path.exists(CHECKPOINT):
        state = torch.load(CHECKPOINT, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        step = state["step"]
    resume = os.environ.get("HOMEBASED_RESUME", "0")
    print(f"start at step {step} (HOMEBASED_RESUME={resume})")

    while step < TOTAL_STEPS:
        x = torch.randn(8, 4)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.6f}")
        time.sleep(STEP_DELAY)
        if yield_requested():
            save(model, optimizer, step)
            print(f"yielding at step {step}")
            sys.exit(YIELDED)

    save(model, optimizer, step)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    print("final weights " + " ".join(f"{w:.17g}" for w in weights))


if __name__ == "__main__":
    main()
