module example.com/inprocess

go 1.26.8

require github.com/delayq/delayq v0.0.0

require (
	github.com/robfig/cron/v3 v3.0.1 // indirect
	golang.org/x/time v0.16.0 // indirect
)

replace github.com/delayq/delayq => ../..
