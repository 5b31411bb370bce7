// The study list (templates/studies.html): every study's state and progress, polled from the
// JSON API every 2 s. EXTERNAL: what a study run from the command line is, said on hover.
const EXTERNAL=document.getElementById('studies').dataset.external;
const byName=(a,b)=>a.name.localeCompare(b.name,'en',{numeric:true});
async function refresh(){const r=await fetch('/api/v1/studies');if(!r.ok)return;
const rows=(await r.json()).sort(byName).map(s=>{const p=s.progress,
pct=p.total?100*p.done/p.total:0;
const best=p.best?Object.entries(p.best.values).map(([k,v])=>esc(k)+'='+(v===null?'-':
Number(v).toPrecision(4))).join(' ')+' (#'+p.best.trial+')':'';
return `<tr><td><a href="/studies/${encodeURIComponent(s.name)}">${esc(s.name)}</a></td>
<td>${s.owner?esc(s.owner):s.state==='external'?'<i title="'+esc(EXTERNAL)+
'">command line</i>':''}</td><td>${esc(s.state)}</td><td><progress max="100" value="${pct}"></progress> ${p.done}/${p.total} (${p.running} running)</td><td>${best}</td></tr>`});
document.querySelector('#studies tbody').innerHTML=rows.join('');}
refresh();setInterval(refresh,2000);
