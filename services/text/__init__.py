"""Text the study handles, whatever its domain: the study's languages, Chinese and English keywords
(jieba segmentation), clipping to a limit, robust JSON out of model text, and the cells of exported CSV files.

May import: nothing of ``services`` (``pyproject.toml`` [tool.layers]: ``text = []``).

Public names: ``languages`` (``LANGUAGES``, ``prompt_language``), ``catalogs`` (``Catalogs``, ``catalogs_at``: the
interface's gettext catalogs), ``keywords`` (``tokenize``, ``keyword_set``),
``clipping``, ``tokens`` (``count_tokens``), ``structured_output`` (``parse_json_object``, ``parse_and_validate``),
``cells`` (``printable``, ``number_text``, ``safe_cell``).
"""
