"""The identity of every commit ssrkit makes (the solver's fresh history, the injector's base, exported
snapshots): one name, one address, never signed. Exported snapshot ids depend on these bytes."""

GIT_NAME = "ssrkit"
GIT_EMAIL = "ssrkit@localhost"
#: the `git -c` options of such a commit (a user's signing setup must not prompt inside a sandbox)
GIT_IDENTITY = f"-c user.name={GIT_NAME} -c user.email={GIT_EMAIL} -c commit.gpgsign=false"
