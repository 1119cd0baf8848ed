"""`python -m ssrkit.train ...` and `accelerate launch -m ssrkit.train ...`: same arguments as `ssrkit train`."""

from ssrkit.cli.train import main

if __name__ == "__main__":
    main()
