module github.com/delayq/delayq

go 1.26.8

require pgregory.net/rapid v1.3.0 // indirect
