#!/bin/sh
# MariaDB for slurmdbd (Debian's mariadb-server): a data directory at first start, the
# accounting database and its user, then the server in the foreground.
#   MARIADB_DATABASE, MARIADB_USER, MARIADB_PASSWORD (docker-compose.yml)
set -eu

DATA=/var/lib/mysql
DB=${MARIADB_DATABASE:-slurm_acct_db}
USER=${MARIADB_USER:-slurm}
PASS=${MARIADB_PASSWORD:-slurmpw}

install -d -o mysql -g mysql /run/mysqld "$DATA"
if [ ! -d "$DATA/mysql" ]; then
    mariadb-install-db --user=mysql --datadir="$DATA" --skip-test-db >/dev/null
fi
# One SQL file run at every start: idempotent, so a kept volume is fine.
cat > /run/mysqld/init.sql <<SQL
CREATE DATABASE IF NOT EXISTS \`$DB\`;
CREATE USER IF NOT EXISTS '$USER'@'%' IDENTIFIED BY '$PASS';
GRANT ALL ON \`$DB\`.* TO '$USER'@'%';
FLUSH PRIVILEGES;
SQL
chown mysql:mysql /run/mysqld/init.sql
exec mariadbd --user=mysql --datadir="$DATA" --bind-address=0.0.0.0 \
    --skip-name-resolve --init-file=/run/mysqld/init.sql \
    --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900
