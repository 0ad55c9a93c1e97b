"""A small, ordinary training script (recorded as is by tests/test_live_recording.py):
a DataLoader with a partial last batch, AdamW, gradient clipping, an LR scheduler and
gradient accumulation over ``--accum`` micro-batches. Prints the optimizer steps it ran."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    args = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.samples, 64)
    y = torch.randint(0, 10, (args.samples,))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.LayerNorm(256), torch.nn.Linear(256, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    steps = 0
    for _ in range(args.epochs):
        for i, (xb, yb) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(xb), yb) / args.accum
            loss.backward()
            if (i + 1) % args.accum == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                sched.step()
                steps += 1
    print(f"optimizer steps: {steps}")


if __name__ == "__main__":
    main()
