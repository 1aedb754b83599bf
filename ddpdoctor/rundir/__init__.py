"""The run dir: where it is made, what files it holds, how they are written and read."""
