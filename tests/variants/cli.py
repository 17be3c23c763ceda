"""``python -m variants``: the analyser's recall table (harness.py), or with ``--fixes`` the table of fixes
proven on the positive variants (fix_proof.py)."""

from __future__ import annotations

from variants import fix_proof, harness


def main(argv=None) -> int:
    ap = harness.parser()
    ap.add_argument("--fixes", action="store_true",
                    help="prove every fix on the positive variants instead: --fix --unsafe-fixes on each, then "
                         "torch (per-rule table; failures to <out>/fix_report.json)")
    args = ap.parse_args(argv)
    transforms = harness.chosen_transforms(ap, args)
    return fix_proof.main(args, transforms) if args.fixes else harness.report_main(args, transforms)
