"""A stand-in for the part of Hugging Face transformers the Trainer example uses, in plain
Python: a Trainer that steps a model over batches, runs callbacks after each step, saves
`checkpoint-<step>` folders when asked and resumes from one. It is not transformers."""

import json
import os
import pickle

import torch


class TrainingArguments:
    def __init__(self, output_dir, max_steps, per_device_train_batch_size=8,
                 learning_rate=0.05, save_steps=500, **_ignored):
        self.output_dir = output_dir
        self.max_steps = max_steps
        self.batch_size = per_device_train_batch_size
        self.learning_rate = learning_rate
        self.save_steps = save_steps


class TrainerState:
    def __init__(self):
        self.global_step = 0


class TrainerControl:
    def __init__(self):
        self.should_save = False
        self.should_training_stop = False


class TrainerCallback:
    def on_step_end(self, args, state, control, **kwargs):
        return control


class Trainer:
    def __init__(self, model, args, train_dataset, callbacks=()):
        self.model, self.args, self.data = model, args, train_dataset
        self.callbacks = list(callbacks)
        self.state = TrainerState()
        self.optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate)

    def _save(self):
        folder = os.path.join(self.args.output_dir, f"checkpoint-{self.state.global_step}")
        tmp = folder + ".tmp"
        os.makedirs(tmp, exist_ok=True)
        with open(os.path.join(tmp, "model.pkl"), "wb") as f:
            pickle.dump(self.model.state_dict(), f)
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump({"global_step": self.state.global_step}, f)
        os.replace(tmp, folder)

    def train(self, resume_from_checkpoint=None):
        if resume_from_checkpoint:
            with open(os.path.join(resume_from_checkpoint, "model.pkl"), "rb") as f:
                self.model.load_state_dict(pickle.load(f))
            with open(os.path.join(resume_from_checkpoint, "trainer_state.json")) as f:
                self.state.global_step = json.load(f)["global_step"]
        n = self.args.batch_size
        while self.state.global_step < self.args.max_steps:
            start = (self.state.global_step * n) % len(self.data)
            rows = [self.data[(start + i) % len(self.data)] for i in range(n)]
            x = torch.stack([r["x"] for r in rows])
            labels = torch.stack([r["labels"] for r in rows])
            loss = self.model(x=x, labels=labels)["loss"]
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.state.global_step += 1
            control = TrainerControl()
            control.should_save = self.state.global_step % self.args.save_steps == 0
            for callback in self.callbacks:
                control = callback.on_step_end(self.args, self.state, control) or control
            if control.should_save:
                self._save()
            if control.should_training_stop:
                break
