"""Data-parallel PyTorch training under torchrun that gives its lane back when homebased asks.

Submit it with "preempt": {"mode": "yield"} and the step's "yield_codes": [75, 1]:
    "workload": {"type": "task",
                 "command": ["torchrun", "--standalone", "--nproc_per_node", "2",
                             "examples/torchrun_ddp.py"],
                 "env": {"PYTHONUNBUFFERED": "1"},
                 "yield_codes": [75, 1]}

torchrun reports a worker that exited 75 as its own exit 1 (a failed worker, as it sees it).
The queue sees only torchrun's code, so without "yield_codes": [75, 1] the yield is counted a
failure (JOB_FAILED) and the checkpoint is never resumed. With it, exit 1 counts as a yield
only when a yield was asked for; a crash at any other time still fails the job.

The contract (docs/CHECKPOINTS.md), for several ranks:
- rank 0 looks for $HOMEBASED_YIELD_FILE between steps and broadcasts what it saw, so that
  every rank stops after the same step;
- rank 0 saves the checkpoint (written beside the old one, renamed over it), every rank waits
  for the save at a barrier, then every rank exits 75;
- at start every rank loads whatever checkpoint exists ($HOMEBASED_RESUME=1 says an earlier
  attempt of this step yielded, but a checkpoint is the truth, not the flag).
Each step's batches come from a generator seeded by the step and the rank, and the gradients
are averaged across ranks, so model, optimizer and step are the whole state: a run that
yielded and resumed ends with the same weights as one that never stopped.

Without a GPU per rank (CPU, or several ranks on one lane) it uses the gloo backend.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

JOB_DIR = os.environ.get("HOMEBASED_JOB_DIR", ".")
# One checkpoint per step of the job: a later step must not load an earlier step's state.
STEP = os.environ.get("HOMEBASED_STEP_INDEX", "0")
CHECKPOINT = os.path.join(JOB_DIR, f"ddp-step{STEP}.pt")
YIELD_FILE = os.environ.get("HOMEBASED_YIELD_FILE", "")
TOTAL_STEPS = int(os.environ.get("EXAMPLE_STEPS", "300"))
# Slows the demo down so that a yield can be watched; real steps take their own time.
STEP_DELAY = float(os.environ.get("EXAMPLE_STEP_DELAY", "0"))
YIELDED = 75


def setup():
    """The process group torchrun describes in RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*."""
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    # NCCL needs a GPU of its own per rank; homebased hands the lane's GPUs over as
    # CUDA_VISIBLE_DEVICES, numbered from 0 inside the run.
    if torch.cuda.is_available() and torch.cuda.device_count() >= world:
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return dist.get_rank(), world, device


def yield_requested(device):
    """Rank 0's look at the yield file, the same answer on every rank."""
    seen = torch.zeros(1, dtype=torch.int32, device=device)
    if dist.get_rank() == 0 and YIELD_FILE and os.path.exists(YIELD_FILE):
        seen += 1
    dist.broadcast(seen, src=0)
    return bool(seen.item())


def save(model, optimizer, step):
    state = {
        "step": step,
        "model": model.module.state_dict(),
        "optimizer": optimizer.state_dict(),
    }
    tmp = CHECKPOINT + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, CHECKPOINT)  # atomic: the old checkpoint or the new one, never half


def batch(step, rank, device):
    """This rank's batch of this step, the same on every attempt."""
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(8, 4, generator=g)
    return x.to(device), x.sum(dim=1, keepdim=True).to(device)


def main():
    rank, world, device = setup()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    if os.path.exists(CHECKPOINT):
        state = torch.load(CHECKPOINT, map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    model = DistributedDataParallel(model)
    if rank == 0:
        resume = os.environ.get("HOMEBASED_RESUME", "0")
        print(f"start at step {step} with {world} ranks (HOMEBASED_RESUME={resume})")

    while step < TOTAL_STEPS:
        x, y = batch(step, rank, device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients of every rank here
        optimizer.step()
        step += 1
        if rank == 0 and step % 50 == 0:
            print(f"step {step} loss {loss.item():.6f}")
        time.sleep(STEP_DELAY)
        if yield_requested(device):
            if rank == 0:
                save(model, optimizer, step)
                print(f"yielding at step {step}")
            dist.barrier()  # nobody leaves before the checkpoint is whole
            dist.destroy_process_group()
            sys.exit(YIELDED)  # torchrun turns this into its own exit 1

    if rank == 0:
        save(model, optimizer, step)
        weights = torch.cat([p.detach().flatten() for p in model.module.parameters()]).tolist()
        print("final weights " + " ".join(f"{w:.17g}" for w in weights))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
