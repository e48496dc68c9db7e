"""Regenerate docs/verification-contract.md from the contract's one source.

Run: ``python scripts/gen_contract_doc.py`` after editing ``attestation/tenant/contract/data.py``.
"""

from __future__ import annotations

from pathlib import Path

from attestation.tenant.contract import CONTRACT, render_markdown

DOC = Path(__file__).resolve().parent.parent / "docs" / "verification-contract.md"


def main() -> None:
    DOC.write_text(render_markdown(CONTRACT), encoding="utf-8")
    print(f"wrote docs/{DOC.name}")


if __name__ == "__main__":
    main()
