// Close matches of a mistyped name, for messages ("did you mean '7'?"): the same rule as the plugin's
// 404s (tb_plugin/close_matches.py): difflib's ratio, 2·M / (|a| + |b|) with M the characters of the
// matching blocks (the longest common substring, then recursively left and right of it). Pure.

/**
 * Characters in the matching blocks of `a` and `b` (difflib.SequenceMatcher, no junk heuristics).
 * @param {string} a
 * @param {string} b
 * @returns {number}
 */
function matchingCharacters(a, b) {
  const stack = [[0, a.length, 0, b.length]];
  let total = 0;
  while (stack.length) {
    const [alo, ahi, blo, bhi] = stack.pop();
    let bestI = alo;
    let bestJ = blo;
    let best = 0;
    let previous = new Map();
    for (let i = alo; i < ahi; i++) {
      const current = new Map();
      for (let j = blo; j < bhi; j++) {
        if (a[i] !== b[j]) continue;
        const k = (previous.get(j - 1) || 0) + 1;
        current.set(j, k);
        if (k > best) {
          bestI = i - k + 1;
          bestJ = j - k + 1;
          best = k;
        }
      }
      previous = current;
    }
    if (!best) continue;
    total += best;
    if (alo < bestI && blo < bestJ) stack.push([alo, bestI, blo, bestJ]);
    if (bestI + best < ahi && bestJ + best < bhi) stack.push([bestI + best, ahi, bestJ + best, bhi]);
  }
  return total;
}

/**
 * difflib's ratio of two strings, in [0, 1].
 * @param {string} a
 * @param {string} b
 */
export function similarity(a, b) {
  const length = a.length + b.length;
  return length ? (2 * matchingCharacters(a, b)) / length : 1;
}

/**
 * Up to `n` of `candidates` at least `cutoff` alike `word`, most alike first (ties keep the
 * candidates' order); `word` itself is never one.
 * @param {string} word
 * @param {Iterable<string>} candidates
 * @param {number} [n]
 * @param {number} [cutoff]
 * @returns {string[]}
 */
export function closeMatches(word, candidates, n = 3, cutoff = 0.5) {
  const scored = [];
  let index = 0;
  for (const candidate of new Set(candidates)) {
    index += 1;
    if (candidate === word || !candidate) continue;
    // difflib's quick bound first: 2·min(|a|, |b|) / (|a| + |b|) is the best ratio possible.
    if ((2 * Math.min(word.length, candidate.length)) / (word.length + candidate.length) < cutoff) continue;
    const ratio = similarity(word, candidate);
    if (ratio >= cutoff) scored.push([ratio, index, candidate]);
  }
  scored.sort((x, y) => y[0] - x[0] || x[1] - y[1]);
  return scored.slice(0, n).map((s) => s[2]);
}

/**
 * " (did you mean 'a' or 'b'?)", or '' when nothing is close.
 * @param {string[]} matches
 */
export function didYouMean(matches) {
  if (!matches.length) return '';
  const quoted = matches.map((m) => `'${m}'`);
  const last = quoted.pop();
  return ` (did you mean ${quoted.length ? `${quoted.join(', ')} or ` : ''}${last}?)`;
}
