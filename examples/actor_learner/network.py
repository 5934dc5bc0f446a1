"""The agent's network: a policy head and a value head, each a small tanh MLP.

Written once over an array module ``xp`` so the same code runs as numpy in the
actors and evaluator (which never import JAX) and as ``jax.numpy`` in the learner:

    params = init(seed=0, obs_size=4, num_actions=2)
    logits, value = apply(params, obs)              # numpy
    logits, value = apply(params, obs, xp=jnp)      # inside the learner's jitted loss
"""

from __future__ import annotations

import numpy as np

Params = dict[str, list[tuple[np.ndarray, np.ndarray]]]


def _layer(rng: np.random.Generator, fan_in: int, fan_out: int, scale: float):
    """Orthogonal weights (scaled) and zero biases: keeps early activations in range."""
    a = rng.standard_normal((max(fan_in, fan_out), min(fan_in, fan_out)))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))
    weights = q if fan_in >= fan_out else q.T
    return (scale * weights).astype(np.float32), np.zeros(fan_out, np.float32)


def init(seed: int, obs_size: int, num_actions: int, hidden: int = 64) -> Params:
    rng = np.random.default_rng(seed)
    sizes = [obs_size, hidden, hidden]
    torso = lambda: [_layer(rng, i, o, np.sqrt(2)) for i, o in zip(sizes, sizes[1:])]
    return {
        'policy': torso() + [_layer(rng, hidden, num_actions, 0.01)],
        'value': torso() + [_layer(rng, hidden, 1, 1.0)],
    }


def _mlp(layers, x, xp):
    for weights, bias in layers[:-1]:
        x = xp.tanh(x @ weights + bias)
    weights, bias = layers[-1]
    return x @ weights + bias


def apply(params: Params, obs, xp=np):
    """Action logits ``[..., num_actions]`` and state values ``[...]`` for ``obs [..., obs_size]``."""
    return _mlp(params['policy'], obs, xp), _mlp(params['value'], obs, xp)[..., 0]


def sample_actions(params: Params, obs: np.ndarray, rng: np.random.Generator):
    """Samples from the policy with the Gumbel-max trick; returns ``(actions, logits)``."""
    logits, _ = apply(params, obs)
    gumbel = -np.log(-np.log(rng.uniform(1e-12, 1.0, size=logits.shape)))
    return np.argmax(logits + gumbel, axis=-1), logits


def greedy_action(params: Params, obs: np.ndarray) -> int:
    logits, _ = apply(params, obs)
    return int(np.argmax(logits))
