"""The pre-registration bundle (``flask --app app prereg-bundle --out FILE.zip``): what a lab files before data
collection, so that the analysis it later reports is the one it registered.

The zip holds ``study_definition.json`` (the study definition in use, without credentials) and
``study_hash.txt`` (its hash, the one the pre-flight reports and exports carry); ``prompts.json`` (each
condition's system-prompt paragraphs and the consolidation prompts); ``providers.json`` (reply, consolidation and
embedding providers and their models, pilot mode); ``preflight.json`` (the latest stored pre-flight report and its
state for this definition); ``codebook.csv`` / ``codebook.md`` (the export's codebook, as the export writes it);
and ``analysis/``: ``analysis.py`` (the report's analysis module, copied unchanged), ``analyse.py`` (runs it on an
export: it reproduces report.json's outcome table), ``analyse.R`` (the same model with lme4/lmerTest),
``requirements.txt`` (the Python packages' versions) and ``README.md``. ``bundle_manifest.json`` lists every file
with its SHA-256.
"""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

from services.memory import recursive_summary, structured_summary
from services.memory.profile import llm_merge
from services.reporting import preflight_record
from services.reporting.export_service import ExportOptions, build_export, deployment_facts, scrub_secrets

HERE = Path(__file__).resolve().parent
ANALYSIS_PACKAGES = ("numpy", "scipy", "statsmodels", "patsy", "pandas")
README = """# Pre-registration bundle

Study definition hash: {hash}

## Reproduce the outcome table from a data export

    python -m venv venv && venv/bin/pip install -r analysis/requirements.txt
    venv/bin/python analysis/analyse.py memory-lab-export.zip --out results.json

`results.json` holds `outcomes` (one row per scale and contrast against the reference condition {reference}:
estimate, 95 % CI, p, n, standardised effect size), `models`, `consort` and `attrition`, the same figures as the
platform's report.json. `analysis/analysis.py` is the platform's analysis module, unchanged.

In R (lme4, lmerTest, jsonlite), on the export unpacked into a folder:

    Rscript analysis/analyse.R export-folder outcomes_r.csv

The R estimates equal the Python ones; intervals and p use Satterthwaite t tests (lmerTest) instead of
statsmodels' Wald z tests, so they differ slightly.
"""


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str).encode("utf-8")


def _providers(runtime) -> dict[str, Any]:
    settings = runtime.settings
    return {**deployment_facts(settings), "embedder_model": runtime.embedder.model,
            "models": {"dashscope_chat": settings.dashscope_chat_model,
                       "dashscope_embedding": settings.dashscope_embedding_model,
                       "openai_compatible_chat": settings.openai_chat_model,
                       "openai_compatible_embedding": settings.openai_embedding_model},
            "note": "models apply to the providers named in reply_providers / consolidation_providers / "
                    "embedding_provider; 'offline' is the deterministic offline provider, not an LLM"}


def _prompts(study) -> dict[str, Any]:
    return {"system_prompts": study.as_dict()["system_prompts"],
            "consolidation": {"profile_merge": llm_merge.PROMPTS,
                              "structured_summary": structured_summary.SUMMARY_SYSTEM_PROMPT,
                              "recursive_summary": recursive_summary.ITERATION_SYSTEM_PROMPT}}


def _versions() -> str:
    lines = []
    for name in ANALYSIS_PACKAGES:
        try:
            lines.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return "\n".join(lines) + "\n"


def bundle_files(runtime) -> dict[str, bytes]:
    """Every file of the bundle, by its path in the zip."""
    study = runtime.study
    with runtime.db.session() as session:
        preflight = preflight_record.manifest_entry(session, study)
        export = build_export(session, study, options=ExportOptions(exclude_pii=True), generated_at=runtime.clock.now(),
                              deployment=deployment_facts(runtime.settings))
    codebook = zipfile.ZipFile(io.BytesIO(export.data))
    files = {
        "study_definition.json": _json(scrub_secrets(study.as_dict())),
        "study_hash.txt": (preflight["study_hash"] + "\n").encode(),
        "prompts.json": _json(_prompts(study)),
        "providers.json": _json(_providers(runtime)),
        "preflight.json": _json(preflight),
        "codebook.csv": codebook.read("codebook.csv"),
        "codebook.md": codebook.read("codebook.md"),
        "analysis/analysis.py": (HERE / "analysis.py").read_bytes(),
        "analysis/analyse.py": (HERE / "bundle" / "analyse.py").read_bytes(),
        "analysis/analyse.R": (HERE / "bundle" / "analyse.R").read_bytes(),
        "analysis/requirements.txt": _versions().encode(),
        "README.md": README.format(hash=preflight["study_hash"], reference=study.report.reference_condition).encode(),
    }
    files["bundle_manifest.json"] = _json({"study_hash": preflight["study_hash"],
                                           "generated_at": export.generated_at.isoformat(),
                                           "files": {name: hashlib.sha256(data).hexdigest()
                                                     for name, data in files.items()}})
    return files


def write_bundle(runtime, out: str | Path) -> list[str]:
    files = bundle_files(runtime)
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return list(files)
