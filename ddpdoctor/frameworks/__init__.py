"""The training frameworks ddpdoctor knows (Lightning, accelerate, ignite, transformers,
DeepSpeed, FSDP): one module each, holding what the runtime patches, what lint knows and
what the analysis explains about that framework, as data and small functions; known.py
lists them and gives the views the rest reads.  Standard library only: the runtime, lint
and analysis all import it."""
