"""The sandbox for model-written programs: AST policy, restricted execution, and a pool of limited workers."""
