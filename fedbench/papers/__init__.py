"""Paper rooms: one package per reproduced paper, found by name.

A room ``fedbench/papers/<paper>/`` holds everything of one paper::

    reference.yaml   the published numbers (schema: fedbench.report.reference)
    claims.py        its claims, registered with fedbench.report.claims.base.claim
    room.py          ROOM: a fedbench.papers.targets.PaperRoom, its tables and figures as typed targets
    *.py             analytic tables of that paper only (FedQVR's costs.py)

Rooms are found by their ``reference.yaml``, here and in the folders of ``FEDBENCH_ROOMS``
(:mod:`fedbench.rooms`, the lookup, which sits below the report); nothing lists them by hand. This
package sits above the report: :mod:`.targets` (a room's targets and their report steps),
:mod:`.reproduce` (``fedbench reproduce``) and :mod:`.page` (a paper's HTML page).
"""

from __future__ import annotations

from fedbench.rooms import UnknownPaper, check_paper, paper_names, paper_part, reference_text, room_dir

__all__ = ["UnknownPaper", "check_paper", "paper_names", "paper_part", "reference_text", "room_dir"]
