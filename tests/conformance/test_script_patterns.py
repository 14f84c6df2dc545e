"""Patterns real training scripts use, each run on CPU and on npu and compared bit for bit."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from msprof_py.adapter import native
from msprof_py.device import SimulatedNpu

Result = tuple[list[float], dict[str, torch.Tensor]]


def _assert_same(script: Callable[[str], Result]) -> None:
    losses_cpu, state_cpu = script("cpu")
    losses_npu, state_npu = script("npu")
    assert losses_npu == losses_cpu
    assert state_npu.keys() == state_cpu.keys()
    differ = [k for k, v in state_cpu.items() if not torch.equal(v, state_npu[k].cpu())]
    assert differ == []


class Images(Dataset):
    """A fixed random image data set (as ``--dummy`` data in the ImageNet example)."""

    def __init__(self, n: int = 32, size: int = 16, classes: int = 10) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, size, size, generator=gen)
        self.y = torch.randint(0, classes, (n,), generator=gen)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def _cnn(classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Dropout(0.25),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, classes),
    )  # fmt: skip


def _topk_accuracy(output: torch.Tensor, target: torch.Tensor, topk: tuple[int, ...]) -> list:
    with torch.no_grad():
        _, pred = output.topk(max(topk), 1, True, True)
        correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [correct[:k].reshape(-1).float().sum(0, keepdim=True) * (100.0 / len(target))
                for k in topk]  # fmt: skip


def test_imagenet_style_loop_with_workers_pin_memory_and_meters(npu: SimulatedNpu) -> None:
    """SGD momentum, a 2-worker pinned DataLoader, non_blocking copies, top-k on device."""

    def script(device: str) -> Result:
        torch.manual_seed(0)
        model = _cnn().to(device)
        criterion = nn.CrossEntropyLoss().to(device)
        opt = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
        # a CPU-only machine never pins (no accelerator): the CPU reference does not either
        loader = DataLoader(Images(), batch_size=8, num_workers=2, pin_memory=device != "cpu")
        losses = []
        for images, target in loader:
            images = images.to(device, non_blocking=True)
            target = target.to(device, non_blocking=True)
            output = model(images)
            loss = criterion(output, target)
            acc1, acc5 = _topk_accuracy(output, target, (1, 5))
            losses += [loss.item(), acc1[0].item(), acc5[0].item()]
            opt.zero_grad()
            loss.backward()
            opt.step()
        return losses, model.state_dict()

    _assert_same(script)


def test_mnist_style_adadelta_steplr_shuffled_workers(npu: SimulatedNpu) -> None:
    def script(device: str) -> Result:
        torch.manual_seed(1)
        model = nn.Sequential(_cnn(), nn.LogSoftmax(dim=1)).to(device)
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
        pin = device != "cpu"
        loader = DataLoader(Images(), batch_size=8, shuffle=True, num_workers=1, pin_memory=pin)
        losses = []
        for _epoch in range(2):
            for data, target in loader:
                data, target = data.to(device), target.to(device)
                opt.zero_grad()
                loss = F.nll_loss(model(data), target)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            sched.step()
        return losses, model.state_dict()

    _assert_same(script)


def test_evaluation_inside_the_training_loop(npu: SimulatedNpu) -> None:
    def script(device: str) -> Result:
        torch.manual_seed(0)
        model = _cnn().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = Images()
        losses = []
        for step, (x, y) in enumerate(DataLoader(data, batch_size=8)):
            model.train()
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if step % 2 == 1:
                model.eval()
                with torch.no_grad():
                    logits = model(data.x[:16].to(device))
                    losses.append(F.cross_entropy(logits, data.y[:16].to(device)).item())
                    losses.append((logits.argmax(1).cpu() == data.y[:16]).float().mean().item())
        return losses, model.state_dict()

    _assert_same(script)


def test_gradient_accumulation_and_clip_grad_norm(npu: SimulatedNpu) -> None:
    def script(device: str) -> Result:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
        model = model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(0)
        losses = []
        for step in range(8):
            x = torch.randn(4, 16, generator=gen).to(device)
            y = torch.randint(0, 4, (4,), generator=gen).to(device)
            loss = F.cross_entropy(model(x), y) / 4
            loss.backward()
            losses.append(loss.item())
            if step % 4 == 3:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
                losses.append(norm.item())
                opt.step()
                opt.zero_grad()
        return losses, model.state_dict()

    _assert_same(script)


def test_gan_with_two_optimizers_per_iteration(npu: SimulatedNpu) -> None:
    def script(device: str) -> Result:
        torch.manual_seed(0)
        gen_net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
        disc = nn.Sequential(nn.Linear(4, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
        gen_net, disc = gen_net.to(device), disc.to(device)
        opt_g = torch.optim.Adam(gen_net.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
        bce = nn.BCEWithLogitsLoss()
        losses = []
        for _ in range(3):
            real = torch.randn(8, 4).to(device)
            noise = torch.randn(8, 8).to(device)
            fake = gen_net(noise)
            ones = torch.ones(8, 1, device=device)
            zeros = torch.zeros(8, 1, device=device)
            opt_d.zero_grad()
            loss_d = bce(disc(real), ones) + bce(disc(fake.detach()), zeros)
            loss_d.backward()
            opt_d.step()
            opt_g.zero_grad()
            loss_g = bce(disc(fake), ones)
            loss_g.backward()
            opt_g.step()
            losses += [loss_d.item(), loss_g.item()]
        state = {f"g.{k}": v for k, v in gen_net.state_dict().items()}
        state.update({f"d.{k}": v for k, v in disc.state_dict().items()})
        return losses, state

    _assert_same(script)


def test_compiled_model_trains_like_cpu_eager(npu: SimulatedNpu) -> None:
    """On npu torch.compile runs the captured ATen graph op by op: CPU eager numerics."""

    def script(device: str) -> Result:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to(device)
        step_model = torch.compile(model) if device == "npu" else model
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(3):
            x = torch.randn(4, 16).to(device)
            loss = step_model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, model.state_dict()

    _assert_same(script)


class _MaskedTokens(Dataset):
    """``count`` sequences of 12 token ids, each its own labels."""

    def __init__(self, count: int = 8) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(1, 96, (12,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def test_hf_trainer_with_per_step_logging_and_evaluation(npu: SimulatedNpu, tmp_path) -> None:
    transformers = pytest.importorskip("transformers")

    def script(device: str) -> Result:
        config = transformers.GPT2Config(
            vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4,
            bos_token_id=1, eos_token_id=2,
        )  # fmt: skip
        config._attn_implementation = "eager"
        transformers.set_seed(0)
        model = transformers.GPT2LMHeadModel(config)
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / device), per_device_train_batch_size=4, max_steps=4,
            logging_steps=1, eval_strategy="steps", eval_steps=2, report_to=[],
            save_strategy="no", use_cpu=device == "cpu", disable_tqdm=True, seed=0,
        )  # fmt: skip
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=_MaskedTokens(16), eval_dataset=_MaskedTokens(16)
        )
        trainer.train()
        assert trainer.args.device.type == device
        logged = [
            entry[key]
            for entry in trainer.state.log_history
            for key in ("loss", "grad_norm", "eval_loss")
            if key in entry
        ]
        return logged, model.state_dict()

    _assert_same(script)


def _tiny_bert(transformers) -> nn.Module:
    config = transformers.BertConfig(
        vocab_size=96, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32,
    )  # fmt: skip
    return transformers.BertForMaskedLM(config)


@pytest.mark.skipif(native.load() is None, reason=native.status())
def test_hf_trainer_resumes_from_its_npu_checkpoint(npu: SimulatedNpu, tmp_path) -> None:
    """The Trainer saves checkpoints of an npu model (weights by save_pretrained, optimizer,
    scheduler and RNG states) and a new Trainer resumed from the first one ends with the same
    weights as the run that went on."""
    transformers = pytest.importorskip("transformers")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=4, save_steps=2,
        logging_steps=1, report_to=[], disable_tqdm=True, seed=0,
    )  # fmt: skip
    whole = transformers.Trainer(
        model=_tiny_bert(transformers), args=args, train_dataset=_MaskedTokens()
    )
    whole.train()
    resumed = transformers.Trainer(
        model=_tiny_bert(transformers), args=args, train_dataset=_MaskedTokens()
    )
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert resumed.args.device.type == "npu"
    expected, got = whole.model.state_dict(), resumed.model.state_dict()
    assert [k for k in expected if not torch.equal(expected[k].cpu(), got[k].cpu())] == []


def test_hf_trainer_bf16_runs_on_npu(npu: SimulatedNpu, tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    model = _tiny_bert(transformers)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2, bf16=True,
        logging_steps=1, report_to=[], save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_MaskedTokens())
    result = trainer.train()
    assert trainer.args.device.type == "npu"
    assert torch.isfinite(torch.tensor(result.training_loss))
    assert all(p.dtype == torch.float32 and p.device.type == "npu" for p in model.parameters())
