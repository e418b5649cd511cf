#!/bin/bash
# usage: run.sh schema  -> one 8 s pgbench run of acquire+release through the lease functions
s=$1
v=3f33230a5fd6
cat > /tmp/pgb/$s.sql <<SQL
SELECT lh_epoch AS e FROM $s.leader_lease_acquire('job', 'h', 30, '', '$v') \gset
SELECT * FROM $s.leader_lease_release('job', 'h', :e, '$v');
SQL
tps=$(pgbench -h 127.0.0.1 -U postgres -n -c 1 -T 8 -f /tmp/pgb/$s.sql test 2>&1 | grep -oP 'tps = \K[0-9.]+' | head -1)
rows=$(psql -h127.0.0.1 -Upostgres -tAc "select count(*) from $s.leader_lease_history" test)
ep=$(psql -h127.0.0.1 -Upostgres -tAc "select epoch from $s.leader_lease where name='job'" test)
echo "$s tps=$tps epoch=$ep history_rows_live=$rows deleted_so_far=$((2*ep - rows))"
