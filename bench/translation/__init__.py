"""The translation task (Exp. 1 control): reference geometries, grid-language prompts, PIoU, null baseline."""
