// The sticky bars of the main column, stacked without gaps or overlap: the error banner at the top,
// the timeline under it, a view's header under the timeline. Their heights change (a banner of
// several lines, a timeline that wraps), so they are measured (ResizeObserver) into CSS variables
// of the scrolling column that style.css offsets the bars by: --xray-banner-height and
// --xray-timeline-height.

/**
 * @param {HTMLElement} column  The scrolling element holding the bars (.xray-main).
 * @param {HTMLElement} banner  The error banner (hidden when empty).
 * @param {HTMLElement} timeline  The timeline bar.
 */
export function stackStickyBars(column, banner, timeline) {
  const measure = () => {
    const bannerHeight = banner.hidden ? 0 : banner.getBoundingClientRect().height;
    const timelineHeight = timeline.getBoundingClientRect().height;
    column.style.setProperty('--xray-banner-height', `${bannerHeight}px`);
    if (timelineHeight > 0) column.style.setProperty('--xray-timeline-height', `${timelineHeight}px`);
  };
  if (typeof ResizeObserver === 'function') {
    const observer = new ResizeObserver(measure);
    observer.observe(banner);
    observer.observe(timeline);
  }
  measure();
}
