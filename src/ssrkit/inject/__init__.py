"""Bug injection (SPEC §4): the procedural injector (`procedural.inject`) and the LLM injector (`llm.inject_llm`),
and `run.run`, either one as `ssrkit inject` asks it; the operators and test mapping they use live in
`ssrkit.mutation`."""
