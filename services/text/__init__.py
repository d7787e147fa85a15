"""Text the study handles, whatever its domain: the study's languages, Chinese and English keywords
(jieba segmentation), clipping to a limit, and robust JSON out of model text.

May import: ``services.platform`` (nothing else of ``services``).

Public names: ``languages`` (``LANGUAGES``, ``prompt_language``), ``keywords`` (``tokenize``,
``keyword_set``), ``clipping``, ``structured_output`` (``parse_json_object``, ``parse_and_validate``).
"""
