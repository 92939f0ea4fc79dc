// Export: a panel as a PNG (the canvas as drawn), and a layer's kind as an animated GIF over the
// timeline, which the plugin draws (tb_plugin/gif.py, route /gif).

/**
 * Downloads a canvas as a PNG file.
 * @param {HTMLCanvasElement} canvas
 * @param {string} filename
 */
export function savePng(canvas, filename) {
  canvas.toBlob((blob) => {
    if (!blob) return;
    const url = URL.createObjectURL(blob);
    const a = document.createElement('a');
    a.href = url;
    a.download = filename.replace(/[^\w.\-]+/g, '_');
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }, 'image/png');
}

/**
 * The URL of a layer kind's GIF (relative to the plugin's base).
 * @param {string} run
 * @param {string} layer
 * @param {string} kind
 * @param {number} [fps]
 * @returns {string}
 */
export function gifUrl(run, layer, kind, fps = 4) {
  return `./gif?${new URLSearchParams({ run, layer, kind, fps: String(fps) })}`;
}
