"""Bug injection (SPEC §4): the procedural injector (`procedural.inject`) and the LLM injector; the operators and
test mapping they use live in `ssrkit.mutation`."""
