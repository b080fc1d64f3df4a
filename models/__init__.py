"""The bundled models: one registered model per file (name = file stem); files starting with "_" are shared code."""
