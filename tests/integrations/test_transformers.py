"""The Transformers callback, under a real ``Trainer.train`` on CPU with tiny models built from
configs (nothing is downloaded: HF_HUB_OFFLINE=1, see conftest)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.transformers, pytest.mark.filterwarnings("error:take_graphs.*did not record")]
transformers = pytest.importorskip("transformers", reason="the Transformers tests need the 'transformers' extra: pip install 'xray-tb[transformers]'")

from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

from transformers.integrations import TensorBoardCallback  # noqa: E402

from xray_tb import KeepAll, Xray, open_run  # noqa: E402
from xray_tb.integrations.transformers import XrayCallback  # noqa: E402

QUERY = "bert.encoder.layer.0.attention.self.query"
PLAN = {QUERY: {"weight": True, "weight_grad": True, "output": True}, "classifier": {"weight_grad": True, "output": True}}


class RecordingSGD(torch.optim.SGD):
    """Plain SGD that keeps the query layer's gradient as each of its steps sees it."""

    def __init__(self, model, lr: float):
        super().__init__(model.parameters(), lr=lr)
        self.watched = model.get_submodule(QUERY).weight
        self.seen: list[torch.Tensor] = []

    def step(self, closure=None):
        self.seen.append(self.watched.grad.detach().clone())
        return super().step(closure)


class Sentences(torch.utils.data.Dataset):
    """Random token ids with padding: every other sentence ends in padding the attention mask hides."""

    def __init__(self, count: int = 32, length: int = 8):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, 40, (count, length), generator=g)
        self.mask = torch.ones(count, length, dtype=torch.long)
        self.mask[::2, length - 3:] = 0
        self.ids[self.mask == 0] = 0
        self.labels = torch.randint(0, 3, (count,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "attention_mask": self.mask[index], "labels": self.labels[index]}


def tiny_bert() -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=16, num_labels=3)
    return BertForSequenceClassification(config)


def arguments(output_dir: Path, **options) -> TrainingArguments:
    defaults = dict(output_dir=str(output_dir), per_device_train_batch_size=4, max_steps=6, learning_rate=0.05,
                    report_to=["tensorboard"], logging_steps=1, save_strategy="no", use_cpu=True, disable_tqdm=True,
                    dataloader_num_workers=0, seed=0)
    return TrainingArguments(**{**defaults, **options})


def test_captures_each_due_optimizer_step_into_the_trainers_tensorboard_run(tmp_path):
    model = tiny_bert()
    optimizer = RecordingSGD(model, lr=0.05)
    callback = XrayCallback(every=2, plan=PLAN, selector=KeepAll())
    trainer = Trainer(model=model, args=arguments(tmp_path, gradient_accumulation_steps=2), train_dataset=Sentences(),
                      optimizers=(optimizer, None), callbacks=[callback])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        trainer.train()

    assert callback.xray.closed and len(optimizer.seen) == 6
    run_folder = Path(callback.xray.logdir)
    # The run of the Trainer's TensorBoard integration: its own event file (the loss) is beside Xray's.
    names = sorted(path.name for path in run_folder.glob("events.out.tfevents.*"))
    assert len(names) == 2 and sum(name.endswith(".xray") for name in names) == 1
    tensorboard = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, TensorBoardCallback))
    assert str(run_folder) == tensorboard.logging_dir and run_folder.parent == tmp_path / "runs"

    run = open_run(run_folder)
    assert run.records() == {
        QUERY: {"weight": [0, 2, 4], "weight_grad": [0, 2, 4], "output": [0, 2, 4]},
        "classifier": {"weight_grad": [0, 2, 4], "output": [0, 2, 4]},
    }
    for step in (0, 2, 4):  # after gradient clipping: the gradient the optimizer used
        torch.testing.assert_close(run.load(QUERY, "weight_grad", step)[0], optimizer.seen[step], rtol=0, atol=0)
    values, header = run.load(QUERY, "output", 0)
    assert header.original_shape == [4, 8, 16] and values.shape == (8, 16)  # sample 0 of the micro-batch: 8 tokens
    assert run.load("classifier", "output", 2)[1].original_shape == [4, 3]

    # The architecture was traced from the first training forward's keyword inputs: input_ids,
    # attention_mask, labels, and the num_items_in_batch the Trainer adds for the loss.
    architecture = run.architecture
    inputs = [node for node in architecture["nodes"] if node["kind"] == "input"]
    assert [node["out_shapes"] for node in inputs] == [[[4, 8]], [[4, 8]], [[4]], [[]]]
    assert any(node.get("module") == QUERY for node in architecture["nodes"])
    assert any(node["kind"] == "output" and node["in_shapes"] == [[4, 3]] for node in architecture["nodes"])  # logits


def test_without_the_tensorboard_integration_it_writes_to_output_dir_xray(tmp_path):
    callback = XrayCallback(every=1, plan={"classifier": {"weight": True}}, health=False)
    Trainer(model=tiny_bert(), args=arguments(tmp_path, report_to=[], max_steps=2), train_dataset=Sentences(),
            callbacks=[callback]).train()
    assert open_run(tmp_path / "xray").records() == {"classifier": {"weight": [0, 1]}}


def test_a_causal_lm_with_model_output_and_attention_mask_traces_and_records(tmp_path):
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0))
    batch = Sentences(count=2)[0]
    inputs = {"input_ids": batch["input_ids"][None], "attention_mask": batch["attention_mask"][None], "labels": batch["input_ids"][None]}
    plan = {"transformer.h.0.mlp.c_fc": {"weight_grad": True, "output": True}, "lm_head": {"output": True}}
    with Xray(model, inputs, plan=plan, logdir=str(tmp_path / "gpt2"), health=False) as xray:
        output = model(**inputs)  # a CausalLMOutputWithCrossAttentions (loss, logits, cache)
        output.loss.backward()
        xray.take_graphs(0)
        assert xray.records() == {"transformer.h.0.mlp.c_fc": {"weight_grad": [0], "output": [0]}, "lm_head": {"output": [0]}}
        assert xray.load("lm_head", "output", 0)[1].original_shape == [1, 8, 40]
    outputs = [node for node in xray.architecture["nodes"] if node["kind"] == "output"]
    assert [node["in_shapes"] for node in outputs] == [[[]], [[1, 8, 40]]]  # the loss and the logits


def test_bad_options_are_refused_when_the_callback_is_made():
    with pytest.raises(TypeError, match=r"health= takes True, False or a HealthOptions\(...\), got 'yes'"):
        XrayCallback(health="yes")
    with pytest.raises(ValueError, match=r"budget_bytes must be a positive number of bytes"):
        XrayCallback(budget_bytes=0)
    with pytest.raises(TypeError, match=r"unexpected option logdri="):
        XrayCallback(logdri="runs")
