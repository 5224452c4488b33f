# requires: torch
# %% [markdown]
# # Hogwild training on the CPU
#
# torch's multiprocessing best practice, the nbmp way: the model's parameters live in
# shared memory (`model.share_memory()`), several workers run SGD on them at once without
# locks, and the parent sees the trained weights. The workers are forked (nbmp's default),
# so the model, the data and the training function defined in this notebook need no
# pickling at all.
#
# **This notebook needs torch** (`pip install torch`; the CPU build is enough:
# `--index-url https://download.pytorch.org/whl/cpu`). Without it, the first cell stops
# the notebook with a message saying so.

# %%
import importlib.util

if importlib.util.find_spec("torch") is None:
    raise SystemExit("this notebook needs torch: pip install torch (the CPU build is enough)")

# %%
import torch
import nbmp

torch.manual_seed(0)
X = torch.randn(4096, 16)
true_w = torch.randn(16, 1)
y = X @ true_w + 0.01 * torch.randn(4096, 1)

model = torch.nn.Linear(16, 1)
model.share_memory()          # parameters in shared memory: every worker updates the same tensors


def mse():
    with torch.no_grad():
        return float(((model(X) - y) ** 2).mean())


print(f"loss before training: {mse():.3f}")

# %%
def train(rank, model, X, y, epochs=5):
    torch.manual_seed(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(epochs):
        for idx in torch.randperm(len(X)).split(64):
            opt.zero_grad()
            loss = ((model(X[idx]) - y[idx]) ** 2).mean()
            loss.backward()
            opt.step()
    return loss.item()


last_losses = nbmp.spawn(train, args=(model, X, y), nprocs=2)
print("each worker's last batch loss:", [round(v, 4) for v in last_losses])
print(f"loss after training, seen by the parent: {mse():.4f}")
