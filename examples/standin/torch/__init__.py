"""A stand-in for the few parts of PyTorch the examples use, in plain Python, so that the
tests run the examples where torch is not installed. It is deterministic like torch: one
global generator (seeded by manual_seed, saved by get_rng_state) draws every random number,
and a linear model learns by real gradient descent, so a run that yields and resumes must
end with the weights of one that never stopped, exactly as with torch. It is not torch."""

import pickle
import random as _random

_gen = _random.Random(0)


def manual_seed(seed):
    _gen.seed(seed)


def get_rng_state():
    return _gen.getstate()


def set_rng_state(state):
    _gen.setstate(state)


class Generator:
    def __init__(self):
        self._r = _random.Random(0)

    def manual_seed(self, seed):
        self._r.seed(seed)
        return self


class Tensor:
    def __init__(self, data, shape):
        self.data = list(data)
        self.shape = tuple(shape)
        self.grad = None

    def sum(self, dim, keepdim=False):
        if len(self.shape) == 1:
            return Tensor([sum(self.data)], (1,) if keepdim else ())
        rows, cols = self.shape
        sums = [sum(self.data[r * cols:(r + 1) * cols]) for r in range(rows)]
        return Tensor(sums, (rows, 1) if keepdim else (rows,))

    def item(self):
        return self.data[0]

    def detach(self):
        return Tensor(self.data, self.shape)

    def flatten(self):
        return Tensor(self.data, (len(self.data),))

    def tolist(self):
        return list(self.data)


def randn(*shape, generator=None):
    r = generator._r if generator is not None else _gen
    n = 1
    for s in shape:
        n *= s
    return Tensor([r.gauss(0.0, 1.0) for _ in range(n)], shape)


def stack(tensors):
    data = [v for t in tensors for v in t.data]
    return Tensor(data, (len(tensors),) + tensors[0].shape)


def cat(tensors):
    return Tensor([v for t in tensors for v in t.data], (sum(len(t.data) for t in tensors),))


def save(obj, f):
    if isinstance(f, str):
        with open(f, "wb") as out:
            pickle.dump(obj, out)
    else:
        pickle.dump(obj, f)


def load(path, weights_only=True):
    with open(path, "rb") as f:
        return pickle.load(f)


class _Prediction(Tensor):
    def __init__(self, data, shape, linear, x):
        super().__init__(data, shape)
        self.linear, self.x = linear, x


class _Loss(Tensor):
    def __init__(self, value, prediction, target):
        super().__init__([value], ())
        self.prediction, self.target = prediction, target

    def backward(self):
        p, x, lin = self.prediction, self.prediction.x, self.prediction.linear
        rows, n_in = x.shape if len(x.shape) == 2 else (1, x.shape[0])
        gw = [0.0] * n_in
        gb = 0.0
        for r in range(rows):
            d = 2.0 * (p.data[r] - self.target.data[r]) / rows
            for i in range(n_in):
                gw[i] += d * x.data[r * n_in + i]
            gb += d
        lin.weight.grad = Tensor(gw, lin.weight.shape)
        lin.bias.grad = Tensor([gb], lin.bias.shape)


class _Module:
    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def parameters(self):
        params = []
        for value in vars(self).values():
            if isinstance(value, _Module):
                params.extend(value.parameters())
        return params

    def state_dict(self):
        return [list(p.data) for p in self.parameters()]

    def load_state_dict(self, state):
        for p, data in zip(self.parameters(), state):
            p.data = list(data)


class _Linear(_Module):
    """in_features -> 1, which is all the examples need."""

    def __init__(self, n_in, n_out):
        assert n_out == 1, "the stand-in has one output"
        bound = 1.0 / n_in ** 0.5
        self.weight = Tensor([_gen.uniform(-bound, bound) for _ in range(n_in)], (1, n_in))
        self.bias = Tensor([_gen.uniform(-bound, bound)], (1,))

    def parameters(self):
        return [self.weight, self.bias]

    def forward(self, x):
        n_in = self.weight.shape[1]
        rows = len(x.data) // n_in
        out = [
            sum(self.weight.data[i] * x.data[r * n_in + i] for i in range(n_in)) + self.bias.data[0]
            for r in range(rows)
        ]
        return _Prediction(out, (rows, 1), self, x)


def _mse_loss(prediction, target):
    n = len(prediction.data)
    value = sum((a - b) ** 2 for a, b in zip(prediction.data, target.data)) / n
    return _Loss(value, prediction, target)


class _SGD:
    def __init__(self, params, lr):
        self.params, self.lr = list(params), lr

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        for p in self.params:
            if p.grad is not None:
                p.data = [v - self.lr * g for v, g in zip(p.data, p.grad.data)]

    def state_dict(self):
        return {"lr": self.lr}

    def load_state_dict(self, state):
        self.lr = state["lr"]


class nn:
    Module = _Module
    Linear = _Linear

    class functional:
        mse_loss = staticmethod(_mse_loss)


class optim:
    SGD = _SGD
