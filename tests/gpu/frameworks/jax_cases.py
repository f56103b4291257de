#!/usr/bin/env python3
"""JAX acceptance cases for curelay (GPU host). Prints `CASE jax.<name> <result>` per case; run natively and through
curelay by tests/gpu/run_frameworks.sh, which compares the two.

XLA picks GEMM and convolution algorithms by timing them (autotuning); timings through curelay differ from native
ones, so a different algorithm could be chosen and the last bits of a result could differ. Autotuning is therefore
off here (both runs use XLA's default algorithm), which keeps the native run bitwise repeatable and comparable.
"""
import hashlib
import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from case_runner import run_cases  # noqa: E402


def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.asarray(a, dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


def case_device():
    devices = jax.devices()
    return f"backend={jax.default_backend()} count={len(devices)} kind={devices[0].device_kind}"


def init_mlp(key, sizes):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, wkey = jax.random.split(key)
        params.append((jax.random.normal(wkey, (fan_in, fan_out), jnp.float32) / np.sqrt(fan_in),
                       jnp.zeros((fan_out,), jnp.float32)))
    return params


def mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def case_mlp_train_jit():
    key = jax.random.PRNGKey(0)
    params = init_mlp(key, [64, 256, 256, 10])
    x = jax.random.normal(jax.random.PRNGKey(1), (128, 64), jnp.float32)
    y = jax.random.randint(jax.random.PRNGKey(2), (128,), 0, 10)

    def loss_fn(p):
        logits = mlp(p, x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    @jax.jit
    def step(p):
        loss, grads = jax.value_and_grad(loss_fn)(p)
        return jax.tree_util.tree_map(lambda a, g: a - 0.1 * g, p, grads), loss

    losses = []
    for _ in range(20):
        params, loss = step(params)
        losses.append(float(loss))
    leaves = jax.tree_util.tree_leaves(params)
    return " ".join(f"{l:.6f}" for l in losses[::4]) + " " + digest(*leaves)


def case_scan_while_loop():
    # lax.scan and while_loop: XLA may run these loops as CUDA graphs with conditional nodes.
    def body(carry, t):
        carry = jnp.tanh(carry @ carry.T * 0.01 + t)
        return carry, carry.sum()

    init = jax.random.normal(jax.random.PRNGKey(3), (32, 32), jnp.float32)
    final, sums = jax.jit(lambda c: jax.lax.scan(body, c, jnp.arange(16, dtype=jnp.float32)))(init)
    count = jax.jit(lambda v: jax.lax.while_loop(lambda s: s[0] < 100.0, lambda s: (s[0] * 1.5 + 1.0, s[1] + 1),
                                                 (v, 0)))(jnp.float32(1.0))
    return f"iterations={int(count[1])} {digest(final, sums)}"


def case_host_transfers():
    host = np.arange(1 << 20, dtype=np.float32)
    dev = jax.device_put(host)
    back = np.asarray(jax.jit(lambda a: a * 2.0 + 1.0)(dev))
    return f"equal={bool(np.array_equal(back, host * 2.0 + 1.0))} {digest(back)}"


def case_conv_grad():
    key = jax.random.PRNGKey(4)
    x = jax.random.normal(key, (8, 3, 32, 32), jnp.float32)
    w = jax.random.normal(jax.random.PRNGKey(5), (16, 3, 3, 3), jnp.float32) * 0.1

    def loss(w):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME")
        return jnp.mean(jax.nn.relu(y) ** 2)

    value, grad = jax.jit(jax.value_and_grad(loss))(w)
    return f"{float(value):.6f} {digest(grad)}"


CASES = [case_device, case_mlp_train_jit, case_scan_while_loop, case_host_transfers, case_conv_grad]


def main():
    run_cases("jax", CASES, set(sys.argv[1:]))


if __name__ == "__main__":
    main()
