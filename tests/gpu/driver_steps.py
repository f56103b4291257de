"""What every tests/gpu/cuda_python_*.py script prints its steps with (imported, not run: the runner's glob skips it).

Each step prints one line, identical natively and through curelay when curelay behaves as the driver does.
"""
from cuda.bindings import driver


def check(result):
    """The values of a binding's answer; raises on any error code."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {error}")
    return values[0] if len(values) == 1 else values


def step(name, thunk):
    """One line per step: its result (or the binding's exception)."""
    try:
        print(name, thunk())
    except Exception as error:  # noqa: BLE001 - the text is what gets compared
        print(name, "raised", type(error).__name__, error)
