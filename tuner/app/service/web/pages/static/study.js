// A study's page (templates/study.html): its trials, Pareto front, learning curves, a ladder's
// rungs and a law's grid, drawn from the JSON API and kept current by its Server-Sent Events.
const STUDY=document.getElementById('study').dataset.name;
const num=v=>Number.isInteger(v)?String(v):Number(v).toPrecision(4);
const inline=s=>esc(s).replace(/`([^`]+)`/g,'<code>$1</code>');
const fmt=v=>v===null||v===undefined?'-':(typeof v==='number'?num(v):esc(v));
function scale(vals,lo,hi){const a=Math.min(...vals),b=Math.max(...vals),s=b>a?b-a:1;
const f=v=>lo+(v-a)/s*(hi-lo);f.lo=a;f.hi=b;return f;}
function axes(X,Y,xl,yl){const t=[0,.5,1];let g='<g class="axes" stroke="#6b7280">'+
'<line x1="40" y1="270" x2="400" y2="270"/><line x1="40" y1="20" x2="40" y2="270"/></g>';
for(const k of t){const xv=X.lo+k*(X.hi-X.lo),yv=Y.lo+k*(Y.hi-Y.lo);
const tick=v=>{const a=Math.abs(v);return a>=1e6?+(v/1e6).toPrecision(3)+'M':a>=1e4?
+(v/1e3).toPrecision(3)+'k':a&&a<1e-2?v.toExponential(1):num(+v.toPrecision(3));};
g+=`<text class="tick" x="${X(xv)}" y="283" font-size="9" text-anchor="middle">${tick(xv)}`+
`</text><text class="tick" x="37" y="${Y(yv)+3}" font-size="9" text-anchor="end">${tick(yv)}`+
'</text>';}
return g+`<text x="220" y="297" font-size="11" text-anchor="middle">${esc(xl)}</text>`+
`<text x="4" y="12" font-size="11">${esc(yl)}</text>`;}
const legend=items=>'<g class="legend">'+items.map(([c,l],i)=>
`<rect x="250" y="${24+i*14}" width="9" height="9" fill="${c}"/>`+
`<text x="263" y="${32+i*14}" font-size="10">${esc(l)}</text>`).join('')+'</g>';
const tiedWithKnee=(d,t)=>!!d.knee_ties&&d.knee_ties.tied.includes(t.number);
const mark=(d,t)=>d.knee===t.number?' (knee)':tiedWithKnee(d,t)?' (tied with the knee)':'';
function front(d){const svg=document.getElementById('front');const o=d.objectives;
document.getElementById('frontbox').hidden=o.length<2;if(o.length<2)return;
const pts=d.trials.filter(t=>t.feasible&&Object.values(t.values).every(v=>v!==null));
if(!pts.length||o.length<2){svg.innerHTML='<text x="10" y="20">no feasible trial with two '+
'objectives yet</text>';return;}
const xs=pts.map(t=>t.values[o[0].name]),ys=pts.map(t=>t.values[o[1].name]);
const X=scale(xs,40,400),Y=scale(ys,270,20);
svg.innerHTML=pts.map(t=>{const f=d.front.includes(t.number),k=d.knee===t.number,
g=tiedWithKnee(d,t);
return `<circle cx="${X(t.values[o[0].name])}" cy="${Y(t.values[o[1].name])}" r="${k?8:5}"
fill="${f?'#d62728':'#1f77b4'}" stroke="${k||g?'#000':'none'}" stroke-width="${k?2:1}"
stroke-dasharray="${g?'2,2':''}"><title>#${t.number}${mark(d,t)}: ${esc(o[0].name)} ${
fmt(t.values[o[0].name])}, ${esc(o[1].name)} ${fmt(t.values[o[1].name])}</title></circle>`})
.join('')+
axes(X,Y,o[0].name,o[1].name)+legend([['#d62728','Pareto front'],['#1f77b4','other feasible']]);}
function curves(d){const svg=document.getElementById('curves');
const cs=d.trials.filter(t=>t.curve.length);if(!cs.length){svg.innerHTML='';return;}
const xs=cs.flatMap(t=>t.curve.map(p=>p[0])),ys=cs.flatMap(t=>t.curve.map(p=>p[1]));
const X=scale(xs,40,400),Y=scale(ys,270,20);
svg.innerHTML=cs.map(t=>{const last=t.curve[t.curve.length-1];
return `<polyline fill="none" stroke="${d.front.includes(t.number)?'#d62728':
t.outcome==='running'?'#2563eb':'#9ca3af'}" points="${t.curve.map(p=>X(p[0])+','+Y(p[1]))
.join(' ')}"><title>#${t.number} (${esc(t.outcome)}): val_loss ${fmt(last[1])} at ${
fmt(last[0])} tokens</title></polyline>`}).join('')+axes(X,Y,'tokens','val_loss')+
legend([['#d62728','Pareto front'],['#2563eb','running'],['#9ca3af','other']]);}
function table(d){const names=d.objectives.map(o=>o.name);
const params=[...new Set(d.trials.flatMap(t=>Object.keys(t.params)))];
document.querySelector('#trials thead').innerHTML='<tr><th>#</th><th>outcome</th>'+
names.map(n=>`<th>${esc(n)}</th>`).join('')+params.map(p=>`<th>${esc(p)}</th>`).join('')+
'<th>reason</th></tr>';
document.querySelector('#trials tbody').innerHTML=d.trials.map(t=>`<tr><td>${t.number}${
mark(d,t)}</td><td>${esc(t.outcome)}</td>${names.map(n=>
`<td>${fmt(t.values[n])}</td>`).join('')}${params.map(p=>`<td>${fmt(t.params[p])}</td>`)
.join('')}<td>${esc(t.reason.split('\n').pop())}</td></tr>`).join('');}
function ladder(d){const box=document.getElementById('ladder');box.hidden=!d.ladder;
if(!d.ladder)return;document.querySelector('#rungs thead').innerHTML='<tr><th>width</th><th>'+
'state</th><th>trials</th><th>best</th></tr>';
document.querySelector('#rungs tbody').innerHTML=d.ladder.rungs.map(r=>`<tr><td>${r.width}`+
`</td><td>${esc(r.state)}</td><td>${r.done}/${r.total??'?'}${r.running?`, ${r.running} `+
'running':''}</td><td>${r.best?`#${r.best.number}: ${esc(r.best.objective)} ${fmt(
r.best.value)} at lr ${fmt(r.best.lr)}`:'-'}</td></tr>`).join('');}
const lg=v=>Math.log10(v);
function law(d){const box=document.getElementById('law');box.hidden=!d.law;if(!d.law)return;
const L=d.law,bs=L.budgets,placed=bs.filter(b=>b.optimum);
document.querySelector('#lawtable thead').innerHTML='<tr><th>tokens per trial</th><th>'+
'state</th><th>trials</th><th>lr* [95%]</th><th>batch* (tokens)</th><th>best-of-n lr (loss)'+
'</th><th>note</th></tr>';
document.querySelector('#lawtable tbody').innerHTML=bs.map(b=>{const o=b.optimum;
const edge=o&&o.at_edge.length?`at the range's edge (${o.at_edge.join(', ')})`:'';
const note=b.held_out?'held out'+(L.predicted?`: predicted lr ${fmt(L.predicted.lr)}`:
''):b.held_out_batch!=null?`held-out batch (batch_end ${b.held_out_batch}): predicted, `+
'never in the law'
:b.left_out_p!=null?`left out of the lr law: with it one power law did not hold (p ${
fmt(b.left_out_p)})`:b.in_lr_law?'in the '+(L.lr_method==='pooled'?'pooled ':'')+'lr law'+
(edge?`, ${edge}`:''):edge?edge+': left out':b.error?b.error:'';
return `<tr><td>${fmt(b.tokens)}</td><td>${esc(b.state)}</td><td>${b.done}/${b.total}${
b.running?`, ${b.running} running`:''}</td><td>${o?`${fmt(o.lr)} [${fmt(o.lr_interval[0])}, ${
fmt(o.lr_interval[1])}]`:'-'}</td><td>${o&&o.batch_placed?fmt(o.batch):'-'}</td><td>${
b.best?`${fmt(b.best.lr)} (${fmt(b.best.loss)})`:'-'}</td><td>${esc(note)}</td></tr>`})
.join('');
const svg=document.getElementById('lawplot');
const xs=bs.map(b=>lg(b.tokens)),ys=[];placed.forEach(b=>ys.push(lg(b.optimum.lr_interval[0]),
lg(b.optimum.lr_interval[1])));bs.forEach(b=>{if(b.best)ys.push(lg(b.best.lr));});
if(L.predicted)ys.push(lg(L.predicted.lr_band[0]),lg(L.predicted.lr_band[1]));
if(!ys.length){svg.innerHTML='<text x="10" y="20">no budget placed yet</text>';return;}
const X=scale(xs,40,400),Y=scale(ys,270,20);let g='';
if(L.lr_law){const a=L.lr_law,x0=Math.min(...xs),x1=Math.max(...xs),
f=x=>lg(a.coef)+a.exponent*x;g+=`<line x1="${X(x0)}" y1="${Y(f(x0))}" x2="${X(x1)}" y2="${
Y(f(x1))}" stroke="#2563eb"><title>${L.lr_method==='pooled'?'pooled ':''}lr law: exponent ${
fmt(a.exponent)} [${fmt(a.exponent_interval[0])}, ${fmt(a.exponent_interval[1])}]${
L.lack_of_fit_p!=null?`; one power law: p ${fmt(L.lack_of_fit_p)}`:''}</title></line>`;}
for(const b of placed){const o=b.optimum,x=X(lg(b.tokens));
g+=`<line x1="${x}" x2="${x}" y1="${Y(lg(o.lr_interval[0]))}" y2="${Y(lg(o.lr_interval[1]))}" `+
`stroke="#111"/><circle cx="${x}" cy="${Y(lg(o.lr))}" r="5" fill="${b.held_out?'#d62728':
'#111'}"><title>${fmt(b.tokens)} tokens: lr* ${fmt(o.lr)} [${fmt(o.lr_interval[0])}, ${
fmt(o.lr_interval[1])}]</title></circle>`;}
for(const b of bs.filter(b=>b.best))g+=`<circle cx="${X(lg(b.tokens))}" cy="${Y(lg(b.best.lr))}"`+
` r="4" fill="none" stroke="#6b7280"><title>best of ${b.done}: lr ${fmt(b.best.lr)}</title>`+
'</circle>';
if(L.predicted){const x=X(lg(bs[bs.length-1].tokens));g+=`<rect x="${x-6}" width="12" y="${
Y(lg(L.predicted.lr_band[1]))}" height="${Y(lg(L.predicted.lr_band[0]))-Y(lg(L.predicted.
lr_band[1]))}" fill="#d6272833"><title>predicted before it ran: lr ${fmt(L.predicted.lr)} [${
fmt(L.predicted.lr_band[0])}, ${fmt(L.predicted.lr_band[1])}]</title></rect>`;}
svg.innerHTML=g+axes(X,Y,'log10 tokens per trial','log10 lr*')+legend([['#111',
'optimum, 95% interval'],['#6b7280','best of n (hollow)'],['#2563eb','lr law (fit)'],
['#d62728','held out: predicted (band)']]);
document.getElementById('lawanswer').textContent=L.answer||'';
const h=L.held_out_check;document.getElementById('lawheld').textContent=h?
`held out at ${fmt(h.tokens)} tokens`+(h.at_batch?` and ${fmt(h.at_batch)} tokens per step `+
'(the one batch searched)':'')+`: lr predicted ${fmt(h.lr_predicted)}, measured ${
fmt(h.lr_measured)} (ratio ${fmt(h.lr_ratio)}, `+(h.lr_inside?'inside the predicted band)':
'outside the predicted band: the law missed its own check)')+
(h.loss_gap_sd!==undefined?`; the predicted `+
`recipe's val_loss ${fmt(h.loss_gap_sd)} sd from the optimum (fitted)`+
(h.loss_gap_best_sd!==undefined?`, ${fmt(h.loss_gap_best_sd)} sd from the best searched trial `+
'(measured)':'')+(h.sd_measured?' (measured noise)':' (sd: the fit residual; noise not '+
'measured)')+(h.floor_below_trials?'; the fitted minimum lies over 2 sd below every trial: '+
'read the measured gap':''):''):'';}
function show(d){document.getElementById('state').textContent=d.state;
document.querySelectorAll('[data-when]').forEach(f=>{f.hidden=
!f.dataset.when.split(' ').includes(d.state);});
const p=d.progress;document.getElementById('progress').textContent=
`${p.done}/${p.total} trials done, ${p.running} running`;
document.getElementById('ties').innerHTML=d.knee_ties?inline(d.knee_ties.sentence):'';
front(d);curves(d);table(d);ladder(d);law(d);}
fetch('/api/v1/studies/'+encodeURIComponent(STUDY)).then(r=>r.json()).then(show);
const es=new EventSource('/api/v1/studies/'+encodeURIComponent(STUDY)+'/events');
es.addEventListener('progress',e=>show(JSON.parse(e.data)));
es.addEventListener('end',()=>es.close());
