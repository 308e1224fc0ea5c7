"""A page's HTML as a tree, to read what a page carries before any script runs (the standard
library's parser; no browser).

    doc = parse(answer.body)
    row = doc.one("tr", data_todo="3")          # attributes: _ for -, class_ for class
    row.one("td", data_label="Owner").text      # its text, blanks folded
    doc.all("span", class_="badge")             # class_ matches one class among several
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Node | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The text inside, as a reader sees it (blanks folded)."""
        return " ".join(self.raw_text().split())

    def raw_text(self) -> str:
        return "".join(c if isinstance(c, str) else c.raw_text() for c in self.children)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def matches(self, tag: str | None, attrs: dict[str, str]) -> bool:
        if tag is not None and self.tag != tag:
            return False
        for key, wanted in attrs.items():
            name = "class" if key == "class_" else key.replace("_", "-")
            if name == "class":
                if wanted not in self.classes:
                    return False
            elif self.attrs.get(name) != wanted:
                return False
        return True

    def all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        found = []
        for child in self.children:
            if isinstance(child, Node):
                if child.matches(tag, attrs):
                    found.append(child)
                found += child.all(tag, **attrs)
        return found

    def one(self, tag: str | None = None, **attrs: str) -> Node:
        found = self.all(tag, **attrs)
        assert len(found) == 1, f"{len(found)} <{tag} {attrs}> where one was expected"
        return found[0]

    def by_id(self, id: str) -> Node:
        return self.one(None, id=id)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document")
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: bytes | str) -> Node:
    builder = _Builder()
    builder.feed(html.decode("utf-8") if isinstance(html, bytes) else html)
    builder.close()
    return builder.root
