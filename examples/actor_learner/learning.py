"""The learner's update: actor-critic with V-trace off-policy correction, in JAX + optax.

Actors act with parameters that lag the learner's by a few updates; V-trace
(importance weights clipped at 1) corrects for that lag, so the update stays an
on-policy actor-critic when the lag is zero. Only the learner imports this module.

    trainer = Trainer(network.init(0, 4, 2), learning_rate=3e-3)
    metrics = trainer.update(stack(trajectories))   # device arrays: no wait for the values
    actor_params = to_numpy(trainer.params)          # only when someone asks for them

The host does as little as it can per update, because the learner's process
also serves every actor's calls with its one GIL: an update hands the step to
the device and returns (it waits only for the step before, so the host can
stack the next batch while the device trains), metrics stay on the device until
someone prints them, and parameters are copied to the host only on request.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from examples.actor_learner import network

# JAX logs each accelerator backend it fails to find at INFO; CPU-only is expected here.
logging.getLogger('jax._src.xla_bridge').setLevel(logging.WARNING)


@dataclasses.dataclass(frozen=True)
class LossConfig:
    discount: float = 0.99
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01


def vtrace(values, bootstrap, rewards, discounts, rhos):
    """V-trace targets and policy-gradient advantages for one unroll of length T."""
    clipped = jnp.minimum(1.0, rhos)
    next_values = jnp.concatenate([values[1:], bootstrap[None]])
    deltas = clipped * (rewards + discounts * next_values - values)

    def backward(acc, step):
        delta, discount, c = step
        acc = delta + discount * c * acc
        return acc, acc

    # Unrolled: a loop on a GPU costs a host round trip per iteration; T is small.
    _, corrections = jax.lax.scan(backward, jnp.zeros(()), (deltas, discounts, clipped),
                                  reverse=True, unroll=True)
    targets = values + corrections
    next_targets = jnp.concatenate([targets[1:], bootstrap[None]])
    advantages = clipped * (rewards + discounts * next_targets - values)
    return jax.lax.stop_gradient(targets), jax.lax.stop_gradient(advantages)


def loss_fn(params, batch, config: LossConfig):
    """Mean actor-critic loss over a batch of unrolls ``[B, T(+1), ...]``."""
    logits, values = network.apply(params, batch['obs'], xp=jnp)
    logits, bootstrap, values = logits[:, :-1], values[:, -1], values[:, :-1]
    log_probs = jax.nn.log_softmax(logits)
    behaviour_log_probs = jax.nn.log_softmax(batch['behaviour_logits'])
    take = lambda lp_: jnp.take_along_axis(lp_, batch['actions'][..., None], axis=-1)[..., 0]
    log_pi, log_mu = take(log_probs), take(behaviour_log_probs)
    discounts = config.discount * (1.0 - batch['dones'])
    rhos = jnp.exp(log_pi - log_mu)
    targets, advantages = jax.vmap(vtrace)(values, bootstrap, batch['rewards'], discounts,
                                           jax.lax.stop_gradient(rhos))
    policy_loss = -jnp.mean(advantages * log_pi)
    value_loss = 0.5 * jnp.mean((targets - values) ** 2)
    entropy = -jnp.mean(jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1))
    loss = policy_loss + config.baseline_cost * value_loss - config.entropy_cost * entropy
    return loss, {'loss': loss, 'value_loss': value_loss, 'entropy': entropy}


class Trainer:
    """Holds parameters and optimizer state on the learner's device; one jitted step.

    The step is compiled once per batch shape, so callers keep to a few batch
    sizes (the learner takes powers of two times its batch size) and compile
    each of them up front (``compile``).
    """

    def __init__(self, params: network.Params, learning_rate: float = 3e-3,
                 config: LossConfig = LossConfig()):
        self.device = jax.devices()[0]
        self._optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(learning_rate))
        self._params = jax.device_put(params, self.device)
        # Placed (committed) like the step's outputs, or the second step would compile again.
        self._opt_state = jax.device_put(self._optimizer.init(self._params), self.device)
        self.compiles = 0
        self._step = jax.jit(self._make_step(config))
        self._in_flight = None  # The newest step's metrics, maybe still being computed.
        # Where update() spends its time (seconds, summed): copying the batch to the
        # device, handing the step over, waiting for the step before.
        self.seconds = {'to_device': 0.0, 'dispatch': 0.0, 'wait_previous': 0.0}

    def _make_step(self, config: LossConfig):
        def step(params, opt_state, batch):
            self.compiles += 1  # Python runs only when jit traces, once per compile.
            grads, metrics = jax.grad(loss_fn, has_aux=True)(params, batch, config)
            updates, opt_state = self._optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, metrics
        return step

    @property
    def params(self) -> network.Params:
        """The newest parameters, on the device (maybe still being computed)."""
        return self._params

    def compile(self, batch: dict[str, np.ndarray], size: int) -> None:
        """Compiles the step for batches of ``size`` now, running it on ``batch`` repeated
        to that size and dropping the result: parameters stay as they are. A compile takes
        seconds; in the middle of training it would stall the learner and the actors."""
        repeated = {key: np.resize(value, (size, *value.shape[1:])) for key, value in batch.items()}
        # Placed as update() places it: jit compiles again for arguments placed otherwise.
        repeated = jax.device_put(repeated, self.device)
        jax.block_until_ready(self._step(self._params, self._opt_state, repeated))

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        """Starts one step on ``batch`` and waits for the step before it to finish.

        Returns the step's metrics as device scalars: ``float()`` them only when
        they are shown (each ``float`` waits for the device).
        """
        began = time.perf_counter()
        batch = jax.device_put(batch, self.device)
        put = time.perf_counter()
        previous = self._in_flight
        self._params, self._opt_state, self._in_flight = self._step(
            self._params, self._opt_state, batch)
        dispatched = time.perf_counter()
        # Waiting here bounds the device's queue to two steps, as a full queue bounds the actors.
        jax.block_until_ready(previous)
        seconds = self.seconds
        seconds['to_device'] += put - began
        seconds['dispatch'] += dispatched - put
        seconds['wait_previous'] += time.perf_counter() - dispatched
        return self._in_flight

    def state(self) -> dict:
        """Parameters and optimizer state as host arrays: what a checkpoint holds."""
        return jax.device_get({'params': self._params, 'opt_state': self._opt_state})

    def restore(self, state: dict) -> None:
        """Continues from ``state()`` of an earlier trainer (same network and optimizer)."""
        self._params = jax.device_put(state['params'], self.device)
        self._opt_state = jax.device_put(state['opt_state'], self.device)

    def numpy_params(self) -> network.Params:
        """The parameters as host numpy arrays, ready to ship to actors."""
        return to_numpy(self._params)


def to_numpy(params: network.Params) -> network.Params:
    """Device parameters as host numpy arrays (one transfer for all of them)."""
    return jax.tree_util.tree_map(np.asarray, jax.device_get(params))


def start_host_copy(params: network.Params) -> None:
    """Starts copying device parameters to the host without waiting: a later
    ``to_numpy`` of them then waits for neither the step nor the transfer."""
    for leaf in jax.tree_util.tree_leaves(params):
        leaf.copy_to_host_async()


def stack(trajectories: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Unrolls → one batch with a leading batch axis (episode returns are dropped).

    One copy per field: each unroll arrived as its own buffers, and the device
    wants one contiguous array per field.
    """
    keys = ('obs', 'actions', 'rewards', 'dones', 'behaviour_logits')
    return {key: np.stack([t[key] for t in trajectories]) for key in keys}
