"""The SIMULATED SGLang server (python -m backend.sandbox.sglang_sim) and its parts."""
