"""The one settings loader (store/config.py, #27 phase 5): every section read through `load_settings`, types
checked by the fields, unknown keys refused, the help in the fields' metadata and docs/config.md made from it."""

from pathlib import Path

import pytest

from ssrkit.errors import SsrkitError
from ssrkit.store.config import load_config
from ssrkit.validate import Settings


def _config(tmp_path, text):
    f = tmp_path / "ssrkit.toml"
    f.write_text(text)
    return load_config(f)


@pytest.mark.parametrize("text, key", [
    ("", "6b1bf0e4eb00"),
    ("[validate]\ntimeout = 90.0\n", "6b1bf0e4eb00"),
    ("[validate]\ntimeout = 90\n", "e38a1392e2a8"),
    ("[validate]\ntimeout = 90\nflaky_runs = 2\ntest_patterns = ['tests/*']\nbudget = 600\n", "b58d7a7f86ae"),
])
def test_the_validation_key_of_existing_configs_is_unchanged(tmp_path, text, key):
    """`Settings.key()` is the cache key of original runs and the settings hash of every validation.json: the
    keys here were computed on main before the loader (an int stays an int, as it was, so `timeout = 90` keeps
    its own key)."""
    assert Settings.from_config(_config(tmp_path, text)).key() == key
    if not text:
        assert Settings().key() == key


def _readers():
    """One entry point per section: what a command calls to read it."""
    from ssrkit.agents.endpoints import client_from_config
    from ssrkit.agents.loop import AgentConfig
    from ssrkit.executor import executor_from_config
    from ssrkit.inject.runner import InjectSettings
    from ssrkit.sandbox import sandbox_options
    from ssrkit.solve.engine import SolveOptions
    from ssrkit.store.attempts import reward_alpha
    from ssrkit.store.config import load_settings
    from ssrkit.train.config import TrainConfig

    return {
        "validate": Settings.from_config, "sandbox": sandbox_options, "solve": SolveOptions.from_config,
        "inject": lambda cfg: load_settings(InjectSettings, cfg), "reward": reward_alpha,
        "train": TrainConfig.from_config, "agent": AgentConfig.from_config,
        "run": lambda cfg: executor_from_config(cfg, None, None, 1),
        "inject-model": lambda cfg: client_from_config(cfg, "inject", base_url="http://x/v1", model="m"),
    }


@pytest.mark.parametrize("section", ["validate", "sandbox", "solve", "inject", "reward", "train", "agent", "run"])
def test_an_unknown_key_is_an_error_in_every_section(tmp_path, section):
    """A typo'd key was ignored in [validate], [solve], [sandbox], [run], [reward] and [inject]: now every
    section says which key, which section, the closest known key and all of them."""
    from ssrkit.store.config import known_keys

    known = known_keys(section)
    typo = known[0][:-1] + "x" + "_"
    with pytest.raises(SsrkitError) as e:
        _readers()[section](_config(tmp_path, f"[{section}]\n{typo} = 1\n"))
    msg = str(e.value)
    assert f"[{section}]: unknown setting {typo!r} (did you mean {known[0]!r}?)" in msg, msg
    assert f"known: {', '.join(known)}" in msg and str(tmp_path) in msg and "\n" not in msg


def test_the_known_keys_of_a_section_are_its_readers_fields():
    from ssrkit.store.config import known_keys

    assert set(known_keys("solve")) == {"jobs", "hide", "attempts", "protected", "canary", "guard_shadows",
                                        "base_url", "model", "api_key_env"}
    assert {"follow_policy", "server_wait", "temperature", "max_turns"} <= set(known_keys("agent"))
    assert {"executor", "ray_address", "policy", "repos"} <= set(known_keys("run"))  # the recipe's record too


@pytest.mark.parametrize("line", ["network = true", "cpu_seconds = 1", "output_bytes = 1", "setup_timeout = 1",
                                  "hide = ['/x']"])
def test_the_sandbox_keys_that_could_widen_it_are_not_settable(tmp_path, line):
    """The network, CPU and output limits, the setup budget and hidden paths are not the file's: a config line
    must never turn the network on (it was ignored, it is now refused)."""
    from ssrkit.sandbox import sandbox_options

    with pytest.raises(SsrkitError, match="unknown setting"):
        sandbox_options(_config(tmp_path, f"[sandbox]\n{line}\n"))


@pytest.mark.parametrize("text, message", [
    ("[sandbox]\nmemory_mb = 'lots'\n", "[sandbox] memory_mb must be an integer, got 'lots'"),
    ("[validate]\ntimeout = '90'\n", "[validate] timeout must be a number, got '90'"),
    ("[solve]\ncanary = 'no'\n", "[solve] canary must be true or false, got 'no'"),
    ("[solve]\nattempts = 2.5\n", "[solve] attempts must be an integer, got 2.5"),
    ("[sandbox]\nenv = 'A=1'\n", "[sandbox] env must be a table of strings, got 'A=1'"),
    ("[reward]\nalpha = true\n", "[reward] alpha must be a number, got True"),
    ("[agent]\nmax_turns = 'ten'\n", "[agent] max_turns must be an integer, got 'ten'"),
    ("[run]\nexecutor = 3\n", "[run] executor must be a string, got 3"),
    ("[inject]\nargs = 3\n", "[inject] args must be a string or a list of strings, got 3"),
])
def test_a_wrong_type_is_one_line_naming_section_key_type_and_value(tmp_path, text, message):
    section = text[1:text.index("]")]
    cfg = _config(tmp_path, text)
    with pytest.raises(SsrkitError) as e:
        _readers()[section](cfg)
    assert str(e.value) == f"{cfg.sources[-1]}: {message}"  # the file first, as for an unknown key


def test_values_are_coerced_by_the_fields_type(tmp_path):
    from ssrkit.sandbox import sandbox_options
    from ssrkit.solve.engine import SolveOptions

    cfg = _config(tmp_path, "[sandbox]\nmemory_mb = 1024\ncpus = 1\nenv = {N = 2, F = true}\nsetup = 'make'\n"
                            "[solve]\nhide = 'a, b'\nattempts = 3\nprotected = ['x.cfg']\n")
    opts = sandbox_options(cfg)
    assert (opts.limits.memory_mb, opts.limits.cpus, opts.env, opts.setup) == (1024, 1, {"N": "2", "F": "True"},
                                                                               "make")
    assert opts.limits.network is False and opts.limits.pids == 512
    solve = SolveOptions.from_config(cfg, attempts=None, jobs=0)
    assert (solve.hide, solve.attempts, solve.jobs, solve.grade.protected) == (["a", "b"], 3, 1, ["x.cfg"])
    assert SolveOptions.from_config(cfg, attempts=5).attempts == 5  # a flag wins


def test_every_setting_documents_itself():
    """Every field a section reads carries its help in its metadata (the docs table is made from it)."""
    from ssrkit.store.config import SECTIONS, _reader, settings_help

    for section, readers in SECTIONS.items():
        for path in readers:
            for h in settings_help(_reader(path)).values():
                assert h.help, f"{path}.{h.name} has no help"


ROOT = Path(__file__).resolve().parents[2]
#: `[section] key` spellings in the docs that are not ssrkit.toml's, and why
NOT_OURS = {("agent", "timeout_sec"): "Harbor's task.toml (docs/export.md)"}


def test_the_settings_page_is_made_from_the_fields():
    """docs/config.md lists every key of every section as the fields' metadata says (regenerate the table with
    `python -m ssrkit.store.config` after changing a setting)."""
    from ssrkit.store.config import settings_reference

    page = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    table = page.split("-->\n", 1)[1].split("<!-- /settings -->")[0]
    assert table.strip() == settings_reference().strip(), "run: python -m ssrkit.store.config"


def test_every_key_the_docs_name_exists():
    """`[section] key` in README, docs/ and recipes/README, and the keys of their ```toml examples, are keys
    a reader of that section reads: a renamed or removed setting cannot stay documented."""
    import re
    import tomllib

    from ssrkit.store.config import SECTIONS, known_keys

    pages = [ROOT / "README.md", ROOT / "recipes" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = set()
    for page in pages:
        text = page.read_text(encoding="utf-8")
        named |= {(s, k, page.name) for s, k in re.findall(r"\[(\w+)\] `?([a-z_]+)\b", text) if s in SECTIONS}
        for block in re.findall(r"```toml\n(.*?)```", text, re.S):
            for s, table in tomllib.loads(block).items():
                named |= {(s, k, page.name) for k in table if s in SECTIONS}
    assert len(named) > 15
    unknown = [(s, k, p) for s, k, p in sorted(named) if k not in known_keys(s) and (s, k) not in NOT_OURS]
    assert unknown == []
