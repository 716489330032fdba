"""EAGLE-3 target-interface contract checks (static, `ast` only; never imports SGLang)."""
