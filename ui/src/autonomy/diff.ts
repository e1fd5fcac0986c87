// A line diff (longest common subsequence) of two texts, for showing what a revision changed.
export type DiffLine = { kind: "same" | "added" | "removed"; text: string };

const MAX_CELLS = 250_000;

export function lineDiff(before: string, after: string): DiffLine[] {
  const a = before ? before.split("\n") : [];
  const b = after ? after.split("\n") : [];
  if (a.length * b.length > MAX_CELLS) {
    // Too large to align: show everything removed, then everything added.
    return [...a.map((text) => ({ kind: "removed" as const, text })), ...b.map((text) => ({ kind: "added" as const, text }))];
  }
  // table[i * width + j]: the longest common subsequence of a[i:] and b[j:].
  const width = b.length + 1;
  const table = new Int32Array((a.length + 1) * width);
  const cell = (i: number, j: number) => table[i * width + j] ?? 0;
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      table[i * width + j] = a[i] === b[j] ? cell(i + 1, j + 1) + 1 : Math.max(cell(i + 1, j), cell(i, j + 1));
    }
  }
  const lines: DiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const left = a[i] ?? "";
    const right = b[j] ?? "";
    if (left === right) {
      lines.push({ kind: "same", text: left });
      i++;
      j++;
    } else if (cell(i + 1, j) >= cell(i, j + 1)) {
      lines.push({ kind: "removed", text: left });
      i++;
    } else {
      lines.push({ kind: "added", text: right });
      j++;
    }
  }
  for (; i < a.length; i++) lines.push({ kind: "removed", text: a[i] ?? "" });
  for (; j < b.length; j++) lines.push({ kind: "added", text: b[j] ?? "" });
  return lines;
}

/** A revision side as text: an overlay's sections in order, or a skill's fields. */
export function contentText(content: Record<string, unknown> | null | undefined): string {
  if (!content) return "";
  const sections = content.sections;
  if (sections && typeof sections === "object") {
    return Object.entries(sections as Record<string, unknown>)
      .map(([strategy, text]) => `[${strategy}]\n${String(text)}`)
      .join("\n\n");
  }
  return ["name", "description", "instructions"]
    .filter((key) => key in content)
    .map((key) => `${key}: ${String(content[key])}`)
    .join("\n");
}
