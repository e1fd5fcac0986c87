"""The last check on learned text: refuse what reads as an instruction aimed at tools, files or secrets.

This is a deny-list, and a deny-list is never complete: it is layered on the two
structural measures that keep attacker text out of learned changes in the first place.
Reflection sees failure evidence only as quoted, escaped JSON inside a data block it is
told never to follow (`reflection.reflection_prompt`), and a learned change is written
from code-owned templates plus the reflection's own short lesson, which may not repeat
the evidence (`overlap.quoted_run`). What this screen adds is a refusal of anything that,
however it got there, would tell every later turn of the agent to run a command, read or
send a file or a credential, ignore its instructions or disable a safeguard.

Learned guidance is short prose about how to work; none of it needs a code span, a path, a
URL, an HTML tag, encoded text or any mention of keys and passwords, so those are refused
outright rather than judged. Text is NFKC-normalized and case-folded first, so full-width
and compatibility forms match; words from other scripts that only look like Latin letters
are not mapped, which is one reason this is not the only defence.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata

# Zero-width and bidirectional controls hide text from a reader while the model still sees it.
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")

_OVERRIDE_VERBS = (
    r"ignor\w*|disregard\w*|forget\w*|forgot|overrid\w*|overrul\w*|supersed\w*|vergiss\w*|vergessen"
    r"|missacht\w*|übergeh\w*|olvid\w*|oubli\w*"
)
_INSTRUCTION_NOUNS = (
    r"instruc\w*|instrukt\w*|prompt\w*|rules?|regeln?|règles?|reglas?|guidelines?|richtlinie\w*|directives?"
    r"|directions?|anweisung\w*|vorgabe\w*|consignes?|polic(?:y|ies)|orders?|befehl\w*"
)
_SAFEGUARDS = (
    r"safety|safeguards?|sandbox\w*|guardrails?|hooks?|filters?|restrictions?|protections?|security|approvals?"
    r"|confirmations?|permissions?|limits?|sicherheit\w*|schutz\w*|einschränkung\w*"
)

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(pattern, re.MULTILINE))
    for reason, pattern in (
        (
            "tells the agent to ignore or override its instructions",
            rf"\b(?:{_OVERRIDE_VERBS})\b[^.\n]{{0,48}}\b(?:{_INSTRUCTION_NOUNS})\b"
            r"|\bsystem[\s_-]*(?:override|prompt|message|instructions?|anweisung\w*|befehl\w*)"
            r"|\b(?:developer|god|admin|debug|dan)\s+mode\b|\bjailbreak\w*|\byou\s+are\s+now\b"
            r"|\bnew\s+instructions?\b|\bneue\s+anweisung\w*"
            r"|<\||\|>|\[/?inst\]|^\s*(?:system|assistant|user|developer)\s*:",
        ),
        (
            "tells the agent to disable a safeguard",
            r"\b(?:disabl\w*|deactivat\w*|turn\w*\s+off|switch\w*\s+off|bypass\w*|circumvent\w*|evad\w*|escap\w*"
            rf"|deaktivier\w*|umgeh\w*|abschalt\w*|ausschalt\w*)\b[^.\n]{{0,40}}\b(?:{_SAFEGUARDS})\b"
            r"|\bwithout\s+(?:asking|approval|confirmation|permission|consent)\b|\bohne\s+(?:nachfrage|zustimmung)\b",
        ),
        (
            "names a secret, key or credential",
            r"(?:^|[^\w])\.env\b|\bdotenv\b|\benv(?:ironment)?[\s_-]*(?:files?|var(?:iable)?s?)\b|\bprintenv\b"
            r"|\bid_(?:rsa|dsa|ecdsa|ed25519)\b|(?:^|[^\w])\.(?:ssh|aws|gnupg|kube|docker)\b|\bauthorized_keys\b"
            r"|(?:^|[^\w])\.(?:netrc|npmrc|pypirc|git-credentials|pgpass)\b|\.(?:pem|p12|pfx|jks|keystore)\b"
            r"|\b(?:api|private|secret|signing|ssh|access|encryption)[\s_-]*keys?\b|\bapikeys?\b"
            r"|\b(?:access|auth|bearer|api|refresh|session|github|oauth)[\s_-]*tokens?\b|\bcredential\w*"
            r"|\bpass(?:word|wd|phrase)s?\b|\bsecrets?\b|\bkeychain\b|\bcookies?\b"
            r"|\bpasswort\w*|\bkennw(?:ort|örter)\w*|\bzugangsdaten\b|\bschlüssel\w*|\bgeheim\w*|\bumgebungsvariable\w*"
            r"|\bcontraseñas?\b|\bmots?\s+de\s+passe\b|\bclés?\b",
        ),
        (
            "tells the agent to run a command",
            r"`|\$\(|\$\{|&&|\|\s*(?:ba|z)?sh\b|(?:^|\s)\$\s+\w"
            r"|\b(?:sudo|chmod|chown|curl|wget|netcat|ncat|nc|scp|rsync|ssh|base64|eval|exec|xxd|powershell|bash|zsh"
            r"|sh|rm|cat|head|tail|less|strings|python3?|node|perl|ruby)\s+(?:-|~|\.|/|\$|'|\")"
            r"|\b(?:run|runs|running|execute\w*|exec|invoke\w*|type|enter|paste|führ\w*|ausführ\w*|ejecut\w*"
            r"|exécut\w*|lanc\w*)\b[^.\n]{0,32}\b(?:commands?|shell|terminal|console|scripts?|befehl\w*|kommando\w*"
            r"|comandos?|commandes?)\b"
            r"|\b(?:use|call|invoke|open|start)\s+(?:the\s+|a\s+)?(?:[\w-]+\s+)?(?:shell|terminal|console|tool)\b",
        ),
        (
            "tells the agent to read, print or send file contents",
            r"\b(?:print|show|display|output|dump|reveal|echo|cat|send|upload|leak|paste|zeig\w*|gib|ausgeb\w*"
            r"|affich\w*|muestr\w*)\b[^.\n]{0,32}\b(?:contents?|inhalt\w*|contenu|contenido)\b"
            r"|(?:^|[\s'\"(\[<])(?:~|\$home|\.{1,2})?/[\w.-]+|\b[a-z]:\\",
        ),
        (
            "points the agent at an outside address or tells it to send data out",
            r"\b(?:https?|ftp|file|wss?)://|\b(?:data|javascript):\S|\bwww\.|\b[\w-]+\.(?:com|net|org|io|ru|cn|xyz|sh|me|co|de"
            r"|info|biz|top|site|online)\b|\b[\w.+-]+@[\w-]+\.\w|\b\d{1,3}(?:\.\d{1,3}){3}\b"
            r"|\bexfiltrat\w*|\bleak\w*"
            r"|\b(?:send|post|upload|transmit|forward|submit|mail|e-?mail|beacon|schick\w*|send\w*|übermittel\w*"
            r"|hochlad\w*|envi\w*|envoy\w*)\b[^.\n]{0,40}\b(?:to|an|zu|à|a)\s+(?:the\s+|a\s+|an\s+|this\s+|that\s+"
            r"|my\s+|den\s+|die\s+|das\s+|einen?\s+)?(?:url|server|endpoint|webhook|address|host|domain|site"
            r"|website|remote|external|attacker|adresse|servidor|serveur)",
        ),
        (
            "carries hidden markup",
            r"<!--|-->|<\s*/?\s*[a-z][\w-]*(?:\s[^>]*)?>|\]\(|^\s*\[[^\]]*\]\s*:",
        ),
    )
)


def _decoded(run: str) -> str | None:
    """The printable text a base64 run encodes, or None when it encodes none."""
    padded = run + "=" * (-len(run) % 4)
    try:
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    if len(text) < 8 or not all(c.isprintable() or c.isspace() for c in text):
        return None
    return text


def instruction_like(text: str) -> str | None:
    """Why `text` may not become learned guidance (a phrase that follows "it ..."), or None."""
    if _INVISIBLE.search(text):
        return "carries invisible characters"
    if any(_decoded(run) is not None for run in _BASE64_RUN.findall(text)):
        return "carries encoded text"
    normalized = unicodedata.normalize("NFKC", text).casefold()
    for reason, pattern in _RULES:
        if pattern.search(normalized):
            return reason
    return None
