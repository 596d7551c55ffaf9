const f = (a, b) => a !== b && a?.b ?? c;
let s = `template ${x} literal`;
/* block
 * comment */
function g() {
	return [...arr].map(x => x * 2).filter(Boolean);
}
// url: https://example.com/a?b=c&d=e#frag
$('#id').on('click', () => {});
