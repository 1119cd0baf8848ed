# ssrkit: started by per-test coverage runs (SSRKIT_COV_DIR is set); see ssrkit_cov.py.
import os
import sys


def _chain():
    """Run the sitecustomize module this one shadows, if there is one."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.origin and os.path.abspath(spec.origin) != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    _chain()
except Exception:
    pass

if os.environ.get("SSRKIT_COV_DIR"):
    import ssrkit_cov

    ssrkit_cov.start()
