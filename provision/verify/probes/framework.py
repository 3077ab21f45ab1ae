"""Probe: import a framework in the environment's Python and, on a GPU, multiply two matrices there.

Run by provision/verify/environment.py as `python -c <this file> NAME WANT_GPU` (NAME pytorch | tensorflow | jax,
WANT_GPU 1 | 0) with {"a": [[...]], "b": [[...]]} on stdin. Prints one line: PROVISION-PROBE {json}.
Standard library only and plain syntax: the environment's Python may be older than the verifier's.
"""

import json
import sys

name, want_gpu = sys.argv[1], sys.argv[2] == "1"
spec = json.load(sys.stdin)
out: dict = {"name": name}
try:
    if name == "pytorch":
        import torch

        out["version"] = torch.__version__
        out["cuda"] = torch.version.cuda
        out["gpu"] = bool(torch.cuda.is_available())
        if want_gpu and out["gpu"]:
            out["device"] = torch.cuda.get_device_name(0)
            torch.backends.cuda.matmul.allow_tf32 = False
            a = torch.tensor(spec["a"], dtype=torch.float32, device="cuda")
            b = torch.tensor(spec["b"], dtype=torch.float32, device="cuda")
            out["c"] = (a @ b).cpu().tolist()
    elif name == "tensorflow":
        import tensorflow as tf

        out["version"] = tf.__version__
        gpus = tf.config.list_physical_devices("GPU")
        out["gpu"] = bool(gpus)
        if want_gpu and gpus:
            tf.config.experimental.enable_tensor_float_32_execution(False)
            out["device"] = gpus[0].name
            with tf.device("/GPU:0"):
                a, b = tf.constant(spec["a"], tf.float32), tf.constant(spec["b"], tf.float32)
                out["c"] = tf.matmul(a, b).numpy().tolist()
    elif name == "jax":
        import jax
        import jax.numpy as jnp

        out["version"] = jax.__version__
        out["gpu"] = False
        if want_gpu:
            # jax.devices("gpu") raises where no CUDA backend loaded (no GPU, no plugin): that is "no GPU" here.
            try:
                gpus = jax.devices("gpu")
            except RuntimeError:
                gpus = []
            out["gpu"] = bool(gpus)
            if gpus:
                out["device"] = gpus[0].device_kind
                a = jax.device_put(jnp.asarray(spec["a"], dtype=jnp.float32), gpus[0])
                b = jax.device_put(jnp.asarray(spec["b"], dtype=jnp.float32), gpus[0])
                # HIGHEST: full float32 products (the default may use TF32 or bf16 passes on Ampere and newer)
                out["c"] = jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST).tolist()
except ImportError as exc:
    out["missing"] = str(exc)
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("PROVISION-PROBE " + json.dumps(out))
