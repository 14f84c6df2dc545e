"""Training scripts the collector tests run under msprof."""

#: a few SGD steps of a Linear model on npu, then ``{end}`` (``.format(steps=..., end=...)``)
LINEAR_STEPS = """
import os, sys, torch
model = torch.nn.Linear(8, 2).to("npu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range({steps}):
    model(torch.randn(4, 8).to("npu")).sum().backward()
    opt.step()
    opt.zero_grad()
{end}
"""
