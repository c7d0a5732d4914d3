"""How a program runs: lowering to tile memory, the engines, the cycle model and the report."""
