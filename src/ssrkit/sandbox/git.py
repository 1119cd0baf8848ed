"""The identity of every commit ssrkit makes (the solver's fresh history, the injector's base, exported
snapshots): one name, one address, never signed. Exported snapshot ids depend on these bytes. And
the command that replaces a sandbox's history by one such commit."""

import shlex

GIT_NAME = "ssrkit"
GIT_EMAIL = "ssrkit@localhost"
#: the `git -c` options of such a commit (a user's signing setup must not prompt inside a sandbox)
GIT_IDENTITY = f"-c user.name={GIT_NAME} -c user.email={GIT_EMAIL} -c commit.gpgsign=false"


def fresh_history_command(message: str) -> str:
    """The command behind `Sandbox.fresh_history`, to chain with others in one command. No template: its
    sample hooks are never run, and copying them was a fifth of the command's time. Its objects are stored
    without compression (the same objects, ids and history; a quarter less time on a real repository, where
    `git add` hashes every file), and only for these two commands: nothing is written to the config."""
    store = "-c core.compression=0 -c core.looseCompression=0"
    return (f"rm -rf .git && git init -q --template= && git {store} add -A . && "
            f"git {store} {GIT_IDENTITY} "
            f"commit -q --no-verify -m {shlex.quote(message)}")
