// The result view of a bifrostNavigator call: its text (and resources) and its images.
// The output is `[summary, ...images]`: the summary's content parts, then each image as
// `{data (URL-safe base64), media_type}` as the turn stored it.

type Part = { type?: string; text?: string; uri?: string; mimeType?: string; bytes?: number };
type Image = { data?: string; media_type?: string };

function dataUri(image: Image): string | null {
  if (typeof image.data !== "string" || !image.media_type?.startsWith("image/")) return null;
  return `data:${image.media_type};base64,${image.data.replace(/-/g, "+").replace(/_/g, "/")}`;
}

export function NavigatorResult({ output }: { output: unknown }) {
  const items = Array.isArray(output) ? output : [output];
  const summary = (items[0] ?? {}) as { operation?: string; isError?: boolean; content?: Part[] };
  const images = items.slice(1) as Image[];
  return (
    <div className="navigator-result" data-testid="navigator-result">
      {(summary.content ?? []).map((part, index) =>
        part.type === "text" ? (
          <pre key={index} className={summary.isError ? "error-text" : undefined}>{part.text}</pre>
        ) : part.type === "resource" ? (
          <pre key={index}>{`${part.uri ?? ""}\n${part.text ?? ""}`}</pre>
        ) : null,
      )}
      {images.map((image, index) => {
        const src = dataUri(image);
        return src ? <img key={index} className="browser-screen" src={src} alt={`${summary.operation ?? "browser"} image ${index + 1}`} /> : null;
      })}
    </div>
  );
}
