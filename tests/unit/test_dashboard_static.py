"""The dashboard's script and templates never turn data into markup: no HTML-parsing DOM
APIs or eval in the script, no ``|safe`` or autoescape switch in the templates (escaping is
then Jinja2's and the DOM's job, docs/dashboard.md "Security")."""

from __future__ import annotations

import re
from importlib import resources

DASHBOARD = resources.files("trainer.dashboard")
MARKUP_SINKS = re.compile(
    r"\.(innerHTML|outerHTML|insertAdjacentHTML)\b|document\.write|\beval\(|new Function\("
)


def test_the_script_writes_text_only() -> None:
    script = (DASHBOARD / "static" / "dashboard.js").read_text()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("//"))
    assert MARKUP_SINKS.findall(code) == []
    assert "textContent" in code


def test_templates_never_switch_escaping_off() -> None:
    for template in (DASHBOARD / "templates").iterdir():
        text = template.read_text()
        assert "|safe" not in text.replace(" ", ""), template.name
        assert "autoescape" not in text, template.name
