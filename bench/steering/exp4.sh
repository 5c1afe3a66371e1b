#!/bin/sh
# exp4: SO_REUSEPORT/SO_REUSEADDR across uids (root = the softrdma user, nobody = another user)
NB="setpriv --reuid=nobody --regid=nogroup --clear-groups"
E=/tmp/steer/exp4_sec
case1() { # $1 = holder cmd prefix, $2 holder opts, $3 holder addr, $4 other prefix, $5 other opts, $6 other addr, title $7
  echo "== $7"
  $1 $E bind $2 $3 2 & h=$!; sleep 0.3
  $4 $E bind $5 $6 2 & o=$!; sleep 0.3
  $E send 40; wait $h $o
}
case1 ""  p 127.0.0.1 "$NB" p  127.0.0.1 "other uid joins a REUSEPORT group"
case1 ""  p 127.0.0.1 "$NB" r  127.0.0.1 "other uid, SO_REUSEADDR, vs REUSEPORT group"
case1 ""  p 127.0.0.1 "$NB" rp 127.0.0.1 "other uid, REUSEADDR|REUSEPORT, vs REUSEPORT group"
case1 ""  p 127.0.0.1 "$NB" p  0.0.0.0   "other uid, wildcard 0.0.0.0 REUSEPORT, vs group on 127.0.0.1"
case1 ""  rp 127.0.0.1 "$NB" r 127.0.0.1 "group ALSO sets SO_REUSEADDR; other uid SO_REUSEADDR"
case1 "$NB" - 127.0.0.1 "" p 127.0.0.1 "other uid squats first (no opts); softrdma (root) binds"
case1 "$NB" - 0.0.0.0 "" p 127.0.0.1 "other uid squats 0.0.0.0:4791 first; softrdma binds 127.0.0.1"
case1 "$NB" p 127.0.0.1 "" p 127.0.0.2 "other uid holds 127.0.0.1; softrdma binds 127.0.0.2 (other address)"
case1 ""  p 127.0.0.1 "" p 127.0.0.1 "same uid joins the group (it may also attach its own cBPF)"
