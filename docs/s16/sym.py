import sys, bisect, subprocess, collections
syms=[]
for line in subprocess.run(["nm","-n","/work/main/build/obj/vmlinux"],capture_output=True,text=True).stdout.splitlines():
    p=line.split()
    if len(p)>=3 and p[1] in "tTwW": syms.append((int(p[0],16),p[2]))
addrs=[a for a,_ in syms]
def count(f):
    c=collections.Counter()
    for l in open(f):
        l=l.strip()
        if not l: continue
        try: a=int(l,16)
        except ValueError: continue
        i=bisect.bisect_right(addrs,a)-1; c[syms[i][1]]+=1
    return c
a=count(sys.argv[1]); b=count(sys.argv[2])
print("total", sum(a.values()), sum(b.values()))
keys=sorted(set(a)|set(b), key=lambda k:-(b[k]-a[k]))
for k in keys[:25]: print(f"{b[k]-a[k]:6d} {a[k]:6d} {b[k]:6d} {k}")
