"""The verdict: grading's pure half, the one definition of each rule a fix is judged by.

Test statuses and the parser's output (`statuses`), which paths are test-like, protected or shadowing a module
(`patterns`), the verdict on a test run (`judge`), the canary and its decision (`canary`), the rewards of both
roles (`rewards`), how a run's output is kept (`output`) and bounded text (`text`).

Standard library only, and every import between its modules is relative: the package is shipped whole inside
exported tasks (`export.verdict_zip`, imported there as `ssrkit_verdict` under `python3 -I -S`), so that an
exported grader judges with exactly the code `ssrkit solve` judges with. tests/test_layout.py holds it to that.
"""
